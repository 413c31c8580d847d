"""Hypothesis strategies for vLLM definitions whose owned settings hide in every extra-args spelling."""

from __future__ import annotations

import json
import shlex
from typing import Any

from hypothesis import strategies as st

from mirbad_protocol import ModelDefinition, SpeculativeDecoding

TOTAL_GIB = 80.0

_TYPED_KEYS = {"method", "model", "num_speculative_tokens", "cudagraph_mode"}
KEYS = st.from_regex(r"[a-z][a-z0-9_]{0,7}", fullmatch=True).filter(lambda key: key not in _TYPED_KEYS)
WORDS = st.sampled_from(["mtp", "ngram", "eagle3", "inductor", "/models/draft", "a b", "x.y"])
CUDAGRAPH_MODES = st.sampled_from(["FULL", "PIECEWISE", "FULL_AND_PIECEWISE", "NONE"])

JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-10_000, 10_000)
    | st.floats(allow_nan=False, allow_infinity=False, width=32)
    | st.text(alphabet="abc XYZ-_.é", max_size=6)
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=6,
)


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _spell(flag: str) -> st.SearchStrategy[str]:
    """A long flag as written with dashes, or with vLLM's accepted underscores."""
    if not flag.startswith("--"):
        return st.just(flag)
    return st.sampled_from([flag, "--" + flag[2:].replace("-", "_")])


@st.composite
def _with_value(draw: st.DrawFn, flag: str, value: str, *, json_value: bool = False) -> list[str]:
    """``flag`` and its value in one of the forms vLLM accepts, or as one whole-line element."""
    form = draw(st.sampled_from(["space", "equals", "line", "quoted-line"]))
    if form == "space":
        return [flag, value]
    if form == "equals":
        return [f"{flag}={value}"]
    if form == "line" and json_value:
        return [f"{flag} {value}"]
    return [f"{flag} {shlex.quote(value)}"]


@st.composite
def owned_scalar(draw: st.DrawFn) -> list[str]:
    flag, value = draw(
        st.sampled_from(
            ["--max-num-seqs", "--max-num-batched-tokens", "--kv-cache-dtype", "--mamba-cache-mode"]
        ).flatmap(lambda name: st.tuples(st.just(name), _scalar_value(name)))
    )
    return draw(_with_value(draw(_spell(flag)), value))


def _scalar_value(flag: str) -> st.SearchStrategy[str]:
    if flag.startswith("--max"):
        return st.integers(1, 100_000).map(str)
    if flag == "--kv-cache-dtype":
        return st.sampled_from(["auto", "fp8", "fp8_e5m2", "bfloat16"])
    return st.sampled_from(["align", "all", "none"])


def owned_switch() -> st.SearchStrategy[list[str]]:
    names = [
        "--enable-prefix-caching",
        "--no-enable-prefix-caching",
        "--async-scheduling",
        "--no-async-scheduling",
    ]
    return st.sampled_from(names).flatmap(_spell).map(lambda flag: [flag])


@st.composite
def owned_object(draw: st.DrawFn) -> list[str]:
    speculative = draw(st.booleans())
    if speculative:
        flag = draw(_spell("--speculative-config"))
        value: dict[str, Any] = draw(speculative_objects())
    else:
        flag = draw(st.sampled_from(["--compilation-config", "--compilation_config", "-cc"]))
        value = draw(st.dictionaries(KEYS, JSON_VALUES, max_size=3))
        if draw(st.booleans()):
            value["cudagraph_mode"] = draw(CUDAGRAPH_MODES)
    return draw(_with_value(flag, _compact(value), json_value=True))


def speculative_objects() -> st.SearchStrategy[dict[str, Any]]:
    typed = st.fixed_dictionaries(
        {},
        optional={
            "method": st.sampled_from(["mtp", "ngram", "eagle3"]),
            "num_speculative_tokens": st.integers(0, 8),
            "model": st.sampled_from(["/models/draft", "org/draft"]),
        },
    )
    return st.tuples(typed, st.dictionaries(KEYS, JSON_VALUES, max_size=2)).map(
        lambda pair: {**pair[1], **pair[0]}
    )


@st.composite
def owned_dotted(draw: st.DrawFn) -> list[str]:
    speculative = draw(st.booleans())
    head = draw(
        _spell("--speculative-config") if speculative else st.sampled_from(["-cc", "--compilation-config"])
    )
    typed = draw(st.booleans())
    if typed and speculative:
        key = draw(st.sampled_from(["method", "model", "num_speculative_tokens"]))
        text = str(draw(st.integers(0, 8))) if key == "num_speculative_tokens" else draw(WORDS)
        path = [key]
    elif typed:
        path, text = ["cudagraph_mode"], draw(CUDAGRAPH_MODES)
    else:
        path = draw(st.lists(KEYS, min_size=1, max_size=3))
        text = draw(WORDS | JSON_VALUES.map(_compact))
        if draw(st.integers(0, 5)) == 0:
            return draw(_with_value(f"{head}.{'.'.join(path)}+", "a,+b"))
    return draw(_with_value(f"{head}.{'.'.join(path)}", text))


OTHER_ARGS = st.sampled_from(
    [
        ["--trust-remote-code"],
        ["--seed", "7"],
        ["-tp", "2"],
        ["-O3"],
        ["-O.level=3"],
        ["-O", "2"],
        ["--chat-template=/models/t.jinja"],
        ["--max-model-len", "4096"],
        ["--quantization", "awq"],
        ["--served-model-name", "alias"],
        ["--tool-call-parser", "hermes"],
        ["--enable-auto-tool-choice"],
        ["--kv-transfer-config.kv_role=kv_both"],
        ["--seed 11"],
        ["--override-generation-config", '{"temperature": 0.5}'],
        ["positional"],
    ]
)

EXTRA_ARGS = st.lists(
    st.one_of(OTHER_ARGS, owned_scalar(), owned_switch(), owned_object(), owned_dotted()), max_size=6
).map(lambda pieces: [arg for piece in pieces for arg in piece])


def _maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


def typed_speculative() -> st.SearchStrategy[SpeculativeDecoding | None]:
    return st.none() | st.builds(
        SpeculativeDecoding,
        method=st.none() | st.sampled_from(["mtp", "ngram"]),
        num_speculative_tokens=st.none() | st.integers(0, 8),
        model=st.none() | st.just("/models/draft"),
        extra=st.dictionaries(KEYS, JSON_VALUES, max_size=2),
    )


@st.composite
def definitions(draw: st.DrawFn, *, extra_args: st.SearchStrategy[list[str]] = EXTRA_ARGS) -> ModelDefinition:
    """A vLLM definition with random typed settings and owned settings hidden in ``extra_args``."""
    return ModelDefinition(
        id="m1",
        served_name=draw(st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,20}", fullmatch=True)),
        model_path=draw(
            st.from_regex(r"[A-Za-z0-9_-]{1,8}(/[A-Za-z0-9._-]{0,6}[A-Za-z0-9_-])?", fullmatch=True)
        ),
        quantization=draw(_maybe(st.sampled_from(["fp8", "awq", "gptq"]))),
        kv_cache_dtype=draw(st.sampled_from(["auto", "fp8"])),
        max_model_len=draw(st.integers(1, 262_144)),
        max_num_seqs=draw(st.integers(1, 1024)),
        max_num_batched_tokens=draw(_maybe(st.integers(1, 65_536))),
        memory_budget_gib=draw(st.floats(0.5, TOTAL_GIB)),
        tool_call_parser=draw(_maybe(st.sampled_from(["hermes", "qwen3_coder"]))),
        reasoning_parser=draw(_maybe(st.sampled_from(["qwen3", "deepseek_r1"]))),
        enable_prefix_caching=draw(_maybe(st.booleans())),
        speculative=draw(typed_speculative()),
        compilation_config=draw(st.dictionaries(KEYS, JSON_VALUES, max_size=3)),
        cudagraph_mode=draw(_maybe(CUDAGRAPH_MODES)),
        async_scheduling=draw(_maybe(st.booleans())),
        mamba_cache_mode=draw(_maybe(st.sampled_from(["align", "all"]))),
        extra_args=draw(extra_args),
    )


# ---------------------------------------------------------------- what the pinned vLLM accepts
# The strategies above explore every spelling with made-up keys; vLLM's own parser refuses unknown
# compilation keys and values outside a flag's choices, so the real-parser tier draws from these.
# Only the spellings vLLM reads itself (no Mirbad-only whole-line elements): the raw form of a
# definition is then a command line vLLM can parse too.

_COMPILATION_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "mode": st.integers(0, 3),
    "backend": st.sampled_from(["inductor", "eager"]),
    # One entry: vLLM refuses "all" beside "none" (or twice), so repeated dotted lists stay out too.
    "custom_ops": st.lists(st.sampled_from(["none", "all", "+rms_norm", "-silu_and_mul"]), max_size=1),
    "cudagraph_capture_sizes": st.lists(st.integers(1, 64), min_size=1, max_size=3),
    "max_cudagraph_capture_size": st.integers(64, 512),
    "use_inductor_graph_partition": st.booleans(),
    "pass_config": st.fixed_dictionaries(
        {}, optional={"fuse_norm_quant": st.booleans(), "eliminate_noops": st.booleans()}
    ),
}
_SPECULATIVE_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "method": st.sampled_from(["mtp", "ngram", "eagle3"]),
    "num_speculative_tokens": st.integers(0, 8),
    "model": st.sampled_from(["/models/draft", "org/draft"]),
    "prompt_lookup_max": st.integers(1, 8),
    "prompt_lookup_min": st.integers(1, 4),
}
ACCEPTED_KV_CACHE_DTYPES = st.sampled_from(["auto", "fp8", "fp8_e5m2", "fp8_e4m3", "bfloat16"])
ACCEPTED_MAMBA_CACHE_MODES = st.sampled_from(["align", "none"])


def _accepted_compilation() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional=_COMPILATION_VALUES)


def _accepted_speculative() -> st.SearchStrategy[dict[str, Any]]:
    # Never empty: vLLM reads `--speculative-config {}` as a draft-model config without a model, while
    # Mirbad reads it as "no speculation" (docs/command-lines.md), so the two would rightly differ.
    optional = {key: value for key, value in _SPECULATIVE_VALUES.items() if key != "method"}
    return st.fixed_dictionaries({"method": _SPECULATIVE_VALUES["method"]}, optional=optional)


@st.composite
def _accepted_with_value(draw: st.DrawFn, flag: str, value: str) -> list[str]:
    return [flag, value] if draw(st.booleans()) else [f"{flag}={value}"]


@st.composite
def _accepted_scalar(draw: st.DrawFn) -> list[str]:
    flag = draw(st.sampled_from(["--max-num-seqs", "--max-num-batched-tokens", "--kv-cache-dtype"]))
    if flag == "--kv-cache-dtype":
        value = draw(ACCEPTED_KV_CACHE_DTYPES)
    else:
        value = str(draw(st.integers(1, 100_000)))
    return draw(_accepted_with_value(draw(_spell(flag)), value))


@st.composite
def _accepted_object(draw: st.DrawFn) -> list[str]:
    if draw(st.booleans()):
        flag, value = draw(_spell("--speculative-config")), draw(_accepted_speculative())
    else:
        flag = draw(st.sampled_from(["--compilation-config", "--compilation_config", "-cc"]))
        value = draw(_accepted_compilation())
        if draw(st.booleans()):
            value["cudagraph_mode"] = draw(CUDAGRAPH_MODES)
    return draw(_accepted_with_value(flag, _compact(value)))


@st.composite
def _accepted_dotted(draw: st.DrawFn) -> list[str]:
    if draw(st.booleans()):
        head = draw(_spell("--speculative-config"))
        key = draw(st.sampled_from(sorted(_SPECULATIVE_VALUES)))
        value = draw(_SPECULATIVE_VALUES[key])
    else:
        head = draw(st.sampled_from(["-cc", "--compilation-config"]))
        key = draw(
            st.sampled_from([*(key for key in _COMPILATION_VALUES if key != "custom_ops"), "cudagraph_mode"])
        )
        value = draw(CUDAGRAPH_MODES if key == "cudagraph_mode" else _COMPILATION_VALUES[key])
    text = value if isinstance(value, str) else _compact(value)
    return draw(_accepted_with_value(f"{head}.{key}", text))


ACCEPTED_OTHER_ARGS = st.sampled_from(
    [
        ["--trust-remote-code"],
        ["--seed", "7"],
        ["-tp", "2"],
        ["-O3"],
        ["-O", "2"],
        ["--chat-template=/models/t.jinja"],
        ["--max-model-len", "4096"],
        ["--quantization", "awq"],
        ["--served-model-name", "alias"],
        ["--tool-call-parser", "hermes"],
        ["--enable-auto-tool-choice"],
        ["--kv-transfer-config.kv_role=kv_both"],
        ["--override-generation-config", '{"temperature": 0.5}'],
        ["--dtype", "bfloat16"],
        ["--enforce-eager"],
    ]
)
ACCEPTED_EXTRA_ARGS = st.lists(
    st.one_of(
        ACCEPTED_OTHER_ARGS, _accepted_scalar(), owned_switch(), _accepted_object(), _accepted_dotted()
    ),
    max_size=6,
).map(lambda pieces: [arg for piece in pieces for arg in piece])


@st.composite
def accepted_definitions(draw: st.DrawFn) -> ModelDefinition:
    """A vLLM definition whose typed fields and extra arguments the pinned vLLM's parser accepts."""
    speculative = draw(st.none() | _accepted_speculative())
    return draw(definitions(extra_args=ACCEPTED_EXTRA_ARGS)).model_copy(
        update={
            "kv_cache_dtype": draw(ACCEPTED_KV_CACHE_DTYPES),
            "mamba_cache_mode": draw(_maybe(ACCEPTED_MAMBA_CACHE_MODES)),
            "compilation_config": draw(_accepted_compilation()),
            "speculative": None if speculative is None else _typed(speculative),
        }
    )


def _typed(value: dict[str, Any]) -> SpeculativeDecoding | None:
    typed = {key: value[key] for key in ("method", "model", "num_speculative_tokens") if key in value}
    extra = {key: item for key, item in value.items() if key not in typed}
    result = SpeculativeDecoding(**typed, extra=extra)
    return None if result.is_empty() else result
