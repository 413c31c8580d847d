"""The workload-preset search's gates: which values a dimension tries, decided without measuring.

Each gate is a pure function of what is known before the first start (the model's ``config.json``,
the drafter's, the image's registered MTP architectures, the saved definition, the KV gate's verdict)
and answers a :class:`GateVerdict`: the values to try and, when some were left out, why (the run's
notes and the plan preview show it).

- MTP depths only with MTP layers and an MTP architecture the image registers: the draft
  architecture vLLM resolves for the checkpoint (from its ``model_type``, else its architecture,
  else ``{family}MTP`` against the architecture's base name), looked up in the image's list, else in
  the pinned vLLM's (:data:`VLLM_MTP_ARCHITECTURES`, whose image may be older than the node's: a
  saved MTP config is proof then too).
- Draft-model depths ``{saved, 3, 7, 11}`` only with a configured draft model, capped by the
  drafter's trained block size (unknown: the saved depth only).
- Mamba hybrids pair prefix caching on with ``--mamba-cache-mode align`` and off with ``none``.
- KV ``auto`` only when the memory gate admits it (its verdict is an input); FP8 always.
- Dense models over 20 B parameters also try max num seqs 1 and 2.
- Max batched tokens always include the saved value and drop values below the max model len when
  chunked prefill is disabled.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from mirbad_protocol import ModelDefinition

__all__ = [
    "BATCHED_TOKENS",
    "DRAFT_DEPTHS",
    "MAX_NUM_SEQS",
    "MTP_DEPTHS",
    "VLLM_MTP_ARCHITECTURES",
    "VLLM_MTP_VERSION",
    "GateVerdict",
    "architecture_base",
    "batched_tokens_gate",
    "chunked_prefill_disabled",
    "draft_depth_gate",
    "drafter_block_size",
    "estimated_parameters_b",
    "is_mamba_hybrid",
    "is_moe",
    "kv_gate",
    "max_num_seqs_gate",
    "mtp_architecture",
    "mtp_gate",
    "mtp_layers",
    "prefix_pairs",
    "weights_format",
]

MTP_DEPTHS: Final = (1, 2, 3, 5)
"""The MTP depths phase 3 tries."""
DRAFT_DEPTHS: Final = (3, 7, 11)
"""The draft-model depths phase 3 tries besides the saved one."""
MAX_NUM_SEQS: Final = (4, 8, 16, 32, 64)
"""Phase 2's max num seqs."""
BATCHED_TOKENS: Final = (2048, 4096, 8192, 16384, 32768)
"""Phase 2's max batched tokens."""
_LARGE_DENSE_B: Final = 20.0
_SMALL_SEQS: Final = (1, 2)
# Bytes per parameter of a weights format (the quantized ones carry scales: a little over their bits).
_BYTES_PER_PARAMETER: Final = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "w8a8": 1.0,
    "gguf-q8": 1.06,
    "awq": 0.56,
    "gptq": 0.56,
    "int4": 0.56,
    "nvfp4": 0.56,
    "mxfp4": 0.53,
}
_ARCH_SUFFIXES: Final = ("ForConditionalGeneration", "ForCausalLM", "Model")
_MAMBA_KEYS: Final = ("hybrid_override_pattern", "layers_block_type")
_MAMBA_FAMILIES: Final = ("mamba", "jamba", "zamba", "nemotronh", "falconh1", "granitemoehybrid", "plamo2")
_DTYPE_FORMATS: Final = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32"}
_MOE_KEYS: Final = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")

VLLM_MTP_VERSION: Final = "0.32.0"
"""The vLLM release the MTP tables below were read from (the vLLM tier's pinned image)."""
# vLLM 0.32.0, read offline from the tier's virtualenv: the MTP entries of its speculative-decoding
# model registry (vllm/model_executor/models/registry.py), and the checkpoint model types and
# architectures its speculative config (vllm/config/speculative.py, SpeculativeConfig's
# hf_config_override) rewrites into each of them. Update all three with the pinned version.
VLLM_MTP_ARCHITECTURES: Final = frozenset(
    {
        "BailingMoeV25MTPModel", "BailingMoeV3MTPModel", "DeepSeekMTPModel", "DeepSeekV4MTPModel",
        "DeepseekV32MTPModel", "Dots3NoteMTPModel", "EagleDeepSeekMTPModel", "ErnieMTPModel",
        "Exaone4_5_MTP", "ExaoneMoeMTP", "Gemma4MTPModel", "Glm4MoeLiteMTPModel", "Glm4MoeMTPModel",
        "Glm5NextMTPModel", "GlmOcrMTPModel", "HYV3MTPModel", "HYV4MTPModel", "InklingMTPModel",
        "InternS2MobiusMTP", "KimiK3MTPModel", "LongCatFlashMTPModel", "MiMoMTPModel",
        "MiMoV2MTPModel", "MiMoV2OmniMTPModel", "MiniMaxM3MTP", "NemotronHMTPModel",
        "OpenPanguMTPModel", "Qwen3NextMTP", "Qwen3_5MTP", "Qwen3_5MoeMTP", "Qwen4ExpMTP",
        "Step3p5MTP",
    }
)  # fmt: skip
"""The MTP draft architectures the pinned vLLM (:data:`VLLM_MTP_VERSION`) registers."""
_MTP_BY_MODEL_TYPE: Final[Mapping[str, str]] = {
    "bailing_hybrid": "BailingMoeV25MTPModel",
    "bailing_hybrid_mtp": "BailingMoeV25MTPModel",
    "bailing_hybrid_v3_mtp": "BailingMoeV3MTPModel",
    "deepseek_mtp": "DeepSeekMTPModel",
    "deepseek_v3": "DeepSeekMTPModel",
    "deepseek_v32": "DeepseekV32MTPModel",
    "deepseek_v4": "DeepSeekV4MTPModel",
    "dots3_note": "Dots3NoteMTPModel",
    "ernie4_5_moe": "ErnieMTPModel",
    "ernie_mtp": "ErnieMTPModel",
    "exaone4_5": "Exaone4_5_MTP",
    "exaone4_5_mtp": "Exaone4_5_MTP",
    "exaone_moe": "ExaoneMoeMTP",
    "exaone_moe_mtp": "ExaoneMoeMTP",
    "gemma4_assistant": "Gemma4MTPModel",
    "gemma4_unified_assistant": "Gemma4MTPModel",
    "glm5_next": "Glm5NextMTPModel",
    "glm_moe_dsa": "DeepseekV32MTPModel",
    "hy_v3": "HYV3MTPModel",
    "hy_v4": "HYV4MTPModel",
    "inkling_mm_model": "InklingMTPModel",
    "inkling_model": "InklingMTPModel",
    "interns2_mobius": "InternS2MobiusMTP",
    "kimi_k3": "KimiK3MTPModel",
    "longcat_flash": "LongCatFlashMTPModel",
    "minimax_m3_mtp": "MiniMaxM3MTP",
    "minimax_m3_vl": "MiniMaxM3MTP",
    "nemotron_h": "NemotronHMTPModel",
    "nemotron_h_mtp": "NemotronHMTPModel",
    "nemotron_h_puzzle": "NemotronHMTPModel",
    "pangu_ultra_moe": "OpenPanguMTPModel",
    "pangu_ultra_moe_mtp": "OpenPanguMTPModel",
    "qwen3_5": "Qwen3_5MTP",
    "qwen3_5_moe": "Qwen3_5MoeMTP",
    "qwen3_5_moe_text": "Qwen3_5MoeMTP",
    "qwen3_5_text": "Qwen3_5MTP",
    "qwen3_next": "Qwen3NextMTP",
    "qwen3_next_mtp": "Qwen3NextMTP",
    "qwen4_exp": "Qwen4ExpMTP",
    "qwen4_exp_mtp": "Qwen4ExpMTP",
    "qwen4_exp_text": "Qwen4ExpMTP",
    "step3p5": "Step3p5MTP",
    "step3p7": "Step3p5MTP",
}
# Checkpoints vLLM recognises by their first architecture rather than their model type.
_MTP_BY_ARCHITECTURE: Final[Mapping[str, str]] = {
    "BailingMoeV2_5ForCausalLM": "BailingMoeV25MTPModel",
    "BailingMoeV3ForCausalLM": "BailingMoeV3MTPModel",
    "BailingMoeV3VLForConditionalGeneration": "BailingMoeV3MTPModel",
    "Glm4MoeForCausalLM": "Glm4MoeMTPModel",
    "Glm4MoeLiteForCausalLM": "Glm4MoeLiteMTPModel",
    "GlmOcrForConditionalGeneration": "GlmOcrMTPModel",
    "MiMoForCausalLM": "MiMoMTPModel",
    "MiMoV2FlashForCausalLM": "MiMoV2MTPModel",
    "MiMoV2ForCausalLM": "MiMoV2MTPModel",
    "MiMoV2OmniForCausalLM": "MiMoV2OmniMTPModel",
    "MiniMaxM3SparseForConditionalGeneration": "MiniMaxM3MTP",
    "NemotronH_Omni_Reasoning_V3": "NemotronHMTPModel",
    "NemotronH_Super_Omni_Reasoning_V3": "NemotronHMTPModel",
    "Step3p5ForCausalLM": "Step3p5MTP",
    "Step3p7ForConditionalGeneration": "Step3p5MTP",
}


@dataclass(frozen=True)
class GateVerdict:
    """What a gate admits: the values to try, in order, and why any were left out (None: none were)."""

    values: tuple[Any, ...]
    note: str | None = None


def _sections(config: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The config and its text section (multimodal models keep the language model's keys there)."""
    sections = [config]
    text = config.get("text_config")
    if isinstance(text, Mapping):
        sections.append(text)
    return sections


def _int_key(config: Mapping[str, Any], *keys: str) -> int:
    for section in _sections(config):
        for key in keys:
            value = section.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    return 0


def mtp_layers(config: Mapping[str, Any]) -> int:
    """The model's MTP layers: ``mtp_num_hidden_layers`` (DeepSeek's ``num_nextn_predict_layers`` too)."""
    return _int_key(config, "mtp_num_hidden_layers", "num_nextn_predict_layers")


def architecture_base(architecture: str) -> str:
    """An architecture's base name: ``Qwen3_5MoeForConditionalGeneration`` → ``Qwen3_5Moe``."""
    for suffix in _ARCH_SUFFIXES:
        if architecture.endswith(suffix) and len(architecture) > len(suffix):
            return architecture[: -len(suffix)]
    return architecture


def _architectures(config: Mapping[str, Any]) -> list[str]:
    found = []
    for section in _sections(config):
        names = section.get("architectures")
        if isinstance(names, list):
            found += [name for name in names if isinstance(name, str)]
    return found


def mtp_architecture(config: Mapping[str, Any]) -> str | None:
    """The MTP draft architecture vLLM builds for a checkpoint (None: it has no rule for it).

    Its ``model_type`` (or its text section's) first, then its first architecture, as
    :data:`VLLM_MTP_VERSION`'s speculative config rewrites them; a checkpoint neither names gets None
    (:func:`mtp_gate` then tries the spec's ``{family}MTP`` spelling).
    """
    for section in _sections(config):
        model_type = section.get("model_type")
        if isinstance(model_type, str) and model_type.lower() in _MTP_BY_MODEL_TYPE:
            return _MTP_BY_MODEL_TYPE[model_type.lower()]
    for name in _architectures(config)[:1]:
        if name in _MTP_BY_ARCHITECTURE:
            return _MTP_BY_ARCHITECTURE[name]
    return None


def mtp_gate(config: Mapping[str, Any], registered: Sequence[str], saved: ModelDefinition) -> GateVerdict:
    """The MTP depths to try (empty with the reason when MTP is not tried).

    Args:
        config: the model's ``config.json``.
        registered: the MTP architectures the image registers; empty: the pinned vLLM's
            (:data:`VLLM_MTP_ARCHITECTURES`), where a saved MTP config is proof besides (the node's
            image may be newer than the list).
        saved: the saved definition.
    """
    if mtp_layers(config) <= 0:
        return GateVerdict((), "MTP not tried: the model has no MTP layers (mtp_num_hidden_layers)")
    # vLLM's own rewrite first; the spec's {family}MTP spelling as well (an image list may use it).
    resolved = mtp_architecture(config)
    family = [f"{architecture_base(name)}MTP" for name in _architectures(config)]
    wanted = list(dict.fromkeys([*([resolved] if resolved else []), *family]))
    known = frozenset(registered) or VLLM_MTP_ARCHITECTURES
    if any(name in known for name in wanted):
        return GateVerdict(MTP_DEPTHS)
    if not registered and saved.speculative is not None and saved.speculative.method == "mtp":
        return GateVerdict(MTP_DEPTHS)
    names = ", ".join(wanted) or "no architecture in config.json"
    image = "the image does not" if registered else f"vLLM {VLLM_MTP_VERSION} does not"
    return GateVerdict((), f"MTP not tried: {image} register {names}")


def draft_depth_gate(
    saved: ModelDefinition, drafter_config: Mapping[str, Any] | None, *, unknown: str | None = None
) -> GateVerdict:
    """The draft-model depths to try: ``{saved, 3, 7, 11}`` capped by the drafter's trained block size.

    Only with a configured draft model (a speculative config naming a ``model`` that is not MTP); the
    block size comes from the drafter's ``config.json`` (``block_size``, or its ``dflash_config``'s);
    unknown, only the saved depth is tried, and the note says why (``unknown``: why there is no
    ``config.json``, e.g. the drafter is not on the node).
    """
    spec = saved.speculative
    if spec is None or spec.model is None or spec.method == "mtp":
        return GateVerdict((), "draft-model depths not tried: no draft model is configured")
    depth = spec.num_speculative_tokens
    saved_depths = () if depth is None else (depth,)
    block = drafter_block_size(drafter_config or {})
    if block is None:
        why = f": {unknown}" if unknown else ""
        return GateVerdict(
            saved_depths, f"draft-model depths: the drafter's block size is unknown (saved only){why}"
        )
    depths = sorted({*saved_depths, *DRAFT_DEPTHS})
    kept = tuple(value for value in depths if 0 < value <= block)
    dropped = [value for value in depths if value not in kept]
    note = (
        f"draft-model depths {dropped} not tried: over the drafter's block size {block}" if dropped else None
    )
    return GateVerdict(kept, note)


def drafter_block_size(config: Mapping[str, Any]) -> int | None:
    """The drafter's trained block size from its ``config.json`` (None: it does not say)."""
    for section in (config, config.get("dflash_config")):
        if isinstance(section, Mapping):
            value = section.get("block_size")
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


def is_mamba_hybrid(config: Mapping[str, Any]) -> bool:
    """Whether the model mixes Mamba (SSM) layers in: hybrid patterns, mamba/ssm keys or a Mamba family."""
    for section in _sections(config):
        if any(key in section for key in _MAMBA_KEYS):
            return True
        if any(str(key).lower().startswith(("mamba", "ssm")) for key in section):
            return True
    names = [name.lower() for name in _architectures(config)]
    return any(family in name for name in names for family in _MAMBA_FAMILIES)


def prefix_pairs(config: Mapping[str, Any], *, hybrid: bool = False) -> tuple[tuple[bool, str | None], ...]:
    """Prefix caching on and off, each with its mamba cache mode (None for a model without Mamba).

    ``hybrid`` says so without a ``config.json`` (the registry's ``hybrid`` tag, a saved mamba cache mode).
    """
    if hybrid or is_mamba_hybrid(config):
        return ((True, "align"), (False, "none"))
    return ((True, None), (False, None))


def kv_gate(kv_auto_fits: bool | None) -> GateVerdict:
    """KV dtypes: FP8 always; ``auto`` only when the memory gate says a full-length request fits."""
    if kv_auto_fits:
        return GateVerdict(("fp8", "auto"))
    why = "unknown" if kv_auto_fits is None else "no"
    return GateVerdict(("fp8",), f"kv auto not tried: whether the budget fits a full-length request: {why}")


def is_moe(config: Mapping[str, Any]) -> bool:
    """Whether the model routes over experts (a MoE model is never dense)."""
    return _int_key(config, *_MOE_KEYS) > 1


def _bits_format(bits: object, *, float_type: bool = False) -> str | None:
    if bits == 8:
        return "fp8" if float_type else "int8"
    if bits == 4:
        return "int4"
    return None


def _quantization_format(quantization: Mapping[str, Any]) -> str | None:
    method = str(quantization.get("quant_method", "")).lower()
    if method == "modelopt":  # NVIDIA ModelOpt names its scheme in quant_algo (FP8, NVFP4 ...)
        return str(quantization.get("quant_algo", "")).lower() or None
    if method == "bitsandbytes":
        return "int4" if quantization.get("load_in_4bit") else "int8"
    if method == "compressed-tensors":
        groups = quantization.get("config_groups")
        for group in groups.values() if isinstance(groups, Mapping) else ():
            weights = group.get("weights") if isinstance(group, Mapping) else None
            if isinstance(weights, Mapping):
                return _bits_format(weights.get("num_bits"), float_type=weights.get("type") == "float")
        return None
    if method in _BYTES_PER_PARAMETER:
        return method
    if method in ("awq_marlin", "gptq_marlin"):
        return method.removesuffix("_marlin")
    return method or None  # a method the estimate does not know: estimated_parameters_b says None


def weights_format(config: Mapping[str, Any]) -> str | None:
    """The weights' format from a ``config.json``: its ``quantization_config``, else its dtype.

    ``fp8``, ``awq``, ``gptq``, ``int4`` (4-bit compressed-tensors, bitsandbytes), ``nvfp4`` and
    ``mxfp4`` … as :func:`estimated_parameters_b` reads them; an unknown quantization method comes
    back as itself (the estimate is then unknown); None when the config says neither.
    """
    for section in _sections(config):
        quantization = section.get("quantization_config")
        if isinstance(quantization, Mapping):
            return _quantization_format(quantization)
    for section in _sections(config):
        dtype = section.get("torch_dtype", section.get("dtype"))
        if isinstance(dtype, str) and dtype.lower() in _DTYPE_FORMATS:
            return _DTYPE_FORMATS[dtype.lower()]
    return None


def estimated_parameters_b(weights_bytes: int | None, weights_format: str | None) -> float | None:
    """Billions of parameters estimated from the weights' size and format (None: unknown)."""
    if not weights_bytes or weights_bytes <= 0:
        return None
    per = _BYTES_PER_PARAMETER.get((weights_format or "bf16").lower())
    if per is None:
        return None
    return weights_bytes / per / 1e9


def max_num_seqs_gate(
    config: Mapping[str, Any], parameters_b: float | None, *, moe: bool = False
) -> GateVerdict:
    """Phase 2's max num seqs; a dense model over 20 B parameters also tries 1 and 2.

    ``moe`` says the model routes over experts without a ``config.json`` (the registry's ``moe`` tag).
    """
    if parameters_b is not None and parameters_b > _LARGE_DENSE_B and not (moe or is_moe(config)):
        return GateVerdict((*_SMALL_SEQS, *MAX_NUM_SEQS))
    return GateVerdict(MAX_NUM_SEQS)


_NO_CHUNKED: Final = re.compile(
    r"^--no-enable-chunked-prefill$|^--enable-chunked-prefill[= ](false|0)$", re.I
)


def chunked_prefill_disabled(definition: ModelDefinition) -> bool:
    """Whether the definition turns chunked prefill off (``--no-enable-chunked-prefill``)."""
    args = definition.extra_args
    joined = [f"{a} {b}" for a, b in itertools.pairwise(args)]
    return any(_NO_CHUNKED.match(element) for element in [*args, *joined])


def batched_tokens_gate(definition: ModelDefinition) -> GateVerdict:
    """Phase 2's max batched tokens: the saved value always.

    Without chunked prefill a prompt must fit one step, so values below the max model len are dropped.
    """
    saved = definition.max_num_batched_tokens
    values = sorted({*BATCHED_TOKENS, *(() if saved is None else (saved,))})
    if not chunked_prefill_disabled(definition):
        return GateVerdict((*((None,) if saved is None else ()), *values))
    kept = [value for value in values if value >= definition.max_model_len or value == saved]
    dropped = [value for value in values if value not in kept]
    note = (
        f"max batched tokens {dropped} not tried: below the max model len {definition.max_model_len} "
        "with chunked prefill disabled"
        if dropped
        else None
    )
    return GateVerdict((*((None,) if saved is None else ()), *kept), note)
