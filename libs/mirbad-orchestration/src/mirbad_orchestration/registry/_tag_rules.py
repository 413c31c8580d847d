"""The evidence behind tag suggestions: flags, typed settings, names and the checkpoint's architecture.

Every rule is a pure function of a definition, so :func:`suggested_slugs` never touches a file or the
network; the caller reads ``config.json`` (architecture, vision config) and passes what it found.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from mirbad_protocol import ModelDefinition

__all__: list[str] = []

LONG_CONTEXT_TOKENS: Final = 65_536
SMALL_MODEL_BILLIONS: Final = 4.0


def _word(pattern: str) -> re.Pattern[str]:
    """Match ``pattern`` as a whole word of a lowercase name (``-``, ``_``, ``/``, ``.`` separate)."""
    return re.compile(rf"(?<![a-z0-9])(?:{pattern})(?![a-z0-9])")


_NAME_CHAT: Final = _word("instruct|chat|it")
_NAME_BASE: Final = _word("base")
_NAME_CODE: Final = re.compile(
    r"coder|codestral|devstral|codellama|codegemma|codeqwen|(?<![a-z0-9])code(?![a-z0-9])"
)
_NAME_REASONING: Final = re.compile(
    r"magistral|(?<![a-z0-9])(?:thinking|reasoning|reasoner|r1|qwq)(?![a-z0-9])"
)
_NAME_VISION: Final = re.compile(
    r"llava|pixtral|idefics|paligemma|mllama|internvl|vision|vlm|(?<![a-z0-9])vl(?![a-z0-9])"
)
_NAME_AUDIO: Final = re.compile(r"whisper|audio|voxtral|ultravox")
_NAME_EMBEDDING: Final = re.compile(r"embed")
_NAME_RERANKER: Final = re.compile(r"rerank")
_NAME_QUANTIZED: Final = _word(
    r"fp8|fp4|nvfp4|mxfp4|awq|gptq|int4|int8|w4a16|w8a8|w4a4|bnb|nf4|4bit|8bit|exl2|i?q[2-8](?:_[a-z0-9]+)*"
)
_NAME_MOE: Final = re.compile(
    r"mixtral|gpt-oss|(?<![a-z0-9])(?:moe|\d+x\d+(?:\.\d+)?b|a\d+(?:\.\d+)?b)(?![a-z0-9])"
)
_NAME_HYBRID: Final = re.compile(r"mamba|nemotron-h|jamba|zamba|falcon-h1|bamba")
_NAME_PARAMS: Final = re.compile(r"(?<![a-z0-9.])(\d+(?:\.\d+)?)([bm])(?![a-z0-9])")

_ARCH_GENERATIVE: Final = re.compile(r"For(?:CausalLM|ConditionalGeneration)$")
_ARCH_EMBEDDING: Final = re.compile(r"(?:Bert|Roberta|Embedding)Model$|ForEmbedding$")
_ARCH_RERANKER: Final = re.compile(r"ForSequenceClassification$")
_ARCH_VISION: Final = re.compile(r"VL|Vision|Llava|LLaVA|Mllama|Idefics|Pixtral|PaliGemma|Vlm")
_ARCH_AUDIO: Final = re.compile(r"Whisper|Audio|Voxtral|Ultravox")
_ARCH_MOE: Final = re.compile(r"Moe|MoE|Mixtral|DeepseekV[23]|GptOss|Jamba|Qwen3Next|Llama4|Dbrx")
_ARCH_HYBRID: Final = re.compile(r"Mamba|NemotronH|Jamba|Zamba|FalconH1|Bamba|GraniteMoeHybrid|Qwen3Next")


@dataclass(frozen=True, slots=True)
class _Evidence:
    """Everything a rule may look at, read once."""

    definition: ModelDefinition
    flags: dict[str, list[str]]
    names: str
    architecture: str
    has_vision_config: bool

    def flag(self, *names: str) -> list[str]:
        """Every value given to any of ``names`` (an empty string for a flag without a value)."""
        return [value for name in names for value in self.flags.get(name, [])]

    def has_flag(self, *names: str) -> bool:
        """Whether any of ``names`` appears, with or without a value."""
        return any(name in self.flags for name in names)


def suggested_slugs(definition: ModelDefinition, architecture: str, has_vision_config: bool) -> set[str]:
    """Return the slugs the evidence supports, unordered (the catalogue orders them)."""
    names = " ".join(
        [definition.id, definition.served_name, definition.model_path]
        + [source.repo_id for source in definition.sources]
    ).lower()
    facts = _Evidence(definition, _read_flags(definition.extra_args), names, architecture, has_vision_config)
    pooling = _pooling_kind(facts)
    found = {pooling} if pooling else set()
    if pooling is None and _is_chat(facts):
        found.add("chat")
    checks: dict[str, Callable[[_Evidence], bool]] = {
        "code": _is_code,
        "reasoning": _is_reasoning,
        "tools": _has_tools,
        "vision": _has_vision,
        "audio": _has_audio,
        "speculative": _is_speculative,
        "quantized": _is_quantized,
        "moe": _is_moe,
        "hybrid": _is_hybrid,
        "long-context": _is_long_context,
        "small": _is_small,
        "gguf": lambda facts: facts.definition.runtime == "llamacpp" or "gguf" in facts.names,
        "mlx": lambda facts: facts.definition.runtime == "mlx" or "mlx" in facts.names,
    }
    found.update(slug for slug, check in checks.items() if check(facts))
    return found


def _read_flags(args: Sequence[str]) -> dict[str, list[str]]:
    # One-line entries ("--runner pooling") are split like a shell would; "--x=v" and "--x v" both read.
    tokens = [token for arg in args for token in arg.split()]
    flags: dict[str, list[str]] = {}
    for index, token in enumerate(tokens):
        if not token.startswith("-") or _is_number(token):
            continue
        name, equals, value = token.partition("=")
        if not equals:
            following = tokens[index + 1] if index + 1 < len(tokens) else ""
            value = (
                following if following and (not following.startswith("-") or _is_number(following)) else ""
            )
        if name.startswith("--"):
            name = name.replace("_", "-")  # vLLM accepts --max_model_len for --max-model-len
        flags.setdefault(name, []).append(value)
    return flags


def _is_number(token: str) -> bool:
    return re.fullmatch(r"-?\d+(?:\.\d+)?", token) is not None


def _pooling_kind(facts: _Evidence) -> str | None:
    converts = facts.flag("--convert")
    tasks = facts.flag("--task")
    if (
        "classify" in converts
        or {"score", "classify"} & set(tasks)
        or facts.has_flag("--reranking", "--rerank")
        or _ARCH_RERANKER.search(facts.architecture)
        or _NAME_RERANKER.search(facts.names)
    ):
        return "reranker"
    if (
        "pooling" in facts.flag("--runner")
        or "embed" in converts
        or {"embed", "embedding"} & set(tasks)
        or facts.has_flag("--embedding", "--embeddings")
        or _ARCH_EMBEDDING.search(facts.architecture)
        or _NAME_EMBEDDING.search(facts.names)
    ):
        return "embedding"
    return None


def _is_chat(facts: _Evidence) -> bool:
    # A base checkpoint or a speech-to-text model generates text but is no chat model.
    if _NAME_BASE.search(facts.names) or _is_transcription(facts):
        return False
    definition = facts.definition
    return bool(
        _NAME_CHAT.search(facts.names)
        or _ARCH_GENERATIVE.search(facts.architecture)
        or definition.tool_call_parser
        or definition.reasoning_parser
    )


def _is_transcription(facts: _Evidence) -> bool:
    return bool(
        "Whisper" in facts.architecture or "whisper" in facts.names or "transcription" in facts.flag("--task")
    )


def _is_code(facts: _Evidence) -> bool:
    return _NAME_CODE.search(facts.names) is not None


def _is_reasoning(facts: _Evidence) -> bool:
    formats = [value for value in facts.flag("--reasoning-format") if value != "none"]
    return bool(
        facts.definition.reasoning_parser
        or facts.flag("--reasoning-parser")
        or formats
        or _NAME_REASONING.search(facts.names)
    )


def _has_tools(facts: _Evidence) -> bool:
    return bool(
        facts.definition.tool_call_parser or facts.has_flag("--tool-call-parser", "--enable-auto-tool-choice")
    )


def _has_vision(facts: _Evidence) -> bool:
    return bool(
        facts.has_vision_config
        or _ARCH_VISION.search(facts.architecture)
        or _NAME_VISION.search(facts.names)
        or facts.has_flag("--mmproj", "-mm")
    )


def _has_audio(facts: _Evidence) -> bool:
    return bool(
        _ARCH_AUDIO.search(facts.architecture)
        or _NAME_AUDIO.search(facts.names)
        or "transcription" in facts.flag("--task")
    )


def _is_speculative(facts: _Evidence) -> bool:
    speculative = facts.definition.speculative
    dotted = any(name.startswith("--speculative-config.") for name in facts.flags)
    return bool(
        (speculative is not None and not speculative.is_empty())
        or dotted
        or facts.has_flag("--speculative-config", "--model-draft", "-md")
    )


def _is_quantized(facts: _Evidence) -> bool:
    quantization = (facts.definition.quantization or "").lower()
    return bool(quantization not in {"", "none"} or _NAME_QUANTIZED.search(facts.names))


def _is_moe(facts: _Evidence) -> bool:
    return bool(_ARCH_MOE.search(facts.architecture) or _NAME_MOE.search(facts.names))


def _is_hybrid(facts: _Evidence) -> bool:
    return bool(
        facts.definition.mamba_cache_mode
        or _ARCH_HYBRID.search(facts.architecture)
        or _NAME_HYBRID.search(facts.names)
    )


def _is_long_context(facts: _Evidence) -> bool:
    # Extra args come last on the command line, so a context flag there is what the server runs with.
    context = facts.definition.max_model_len
    for value in facts.flag("--max-model-len", "--ctx-size", "-c"):
        context = _token_count(value) or context
    return context >= LONG_CONTEXT_TOKENS


def _token_count(value: str) -> int | None:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmM]?)", value)
    if match is None:
        return None
    scale = {"": 1, "k": 1_000, "K": 1_024, "m": 1_000_000, "M": 1_048_576}[match.group(2)]
    return int(float(match.group(1)) * scale)


def _is_small(facts: _Evidence) -> bool:
    sizes = [
        float(number) / (1_000 if unit == "m" else 1) for number, unit in _NAME_PARAMS.findall(facts.names)
    ]
    return bool(sizes) and max(sizes) <= SMALL_MODEL_BILLIONS
