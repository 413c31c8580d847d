"""The settings a tuning run varies, one dimension at a time, and the plan of a run.

A :class:`Dimension` names a setting, the values tried and how a value is written onto a definition;
every candidate is normalized, so no raw flag in ``extraArgs`` can override what the candidate sets.
vLLM's classic order (:func:`vllm_dimensions`) is speculative decoding, max num seqs, max batched
tokens, KV cache dtype; a pooling (embedding) model varies only max num seqs and max batched tokens
(:func:`pooling_dimensions`); llama-server's (:func:`llamacpp_dimensions`) is parallel slots, threads,
batch, micro-batch, flash attention, KV cache type. Never the max model len or the memory budget.

The KV gate (:func:`kv_auto_fits`): the KV dimension is tried only when the budget, less the weights,
holds the KV cache of one full-length request (``max_model_len`` tokens) at ``auto``, the model's own
dtype: ``2 (K and V) x layers x KV heads x head dim x dtype bytes`` per token, as vLLM sizes its cache
blocks. The shape comes from the checkpoint's ``config.json`` (:meth:`ModelShape.from_config`) or a
GGUF header (:meth:`ModelShape.from_gguf`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from mirbad_orchestration.commandline import launch_spec_for, normalize_definition
from mirbad_orchestration.exceptions import NoTuningStepsError, UnknownTuningStepError
from mirbad_protocol import ModelDefinition, SpeculativeDecoding
from mirbad_protocol.agent import GgufInfo
from mirbad_protocol.tuning import TuningCandidate, TuningSearch

__all__ = [
    "LLAMACPP_QUICK",
    "POOLING_QUICK",
    "VLLM_QUICK",
    "Dimension",
    "ModelShape",
    "TuningPlan",
    "apply_best",
    "effective_config",
    "extra_flag_value",
    "fingerprint",
    "kv_auto_fits",
    "kv_cache_bytes_per_token",
    "llamacpp_dimensions",
    "plan_for",
    "pooling_dimensions",
    "set_extra_flag",
    "vllm_dimensions",
]

Value = str | int | None
VLLM_QUICK: Final = ("speculative", "max_num_seqs")
"""The dimensions a Quick vLLM run tries (the rest only in Full)."""
LLAMACPP_QUICK: Final = ("parallel", "flash_attn")
"""The dimensions a Quick llama-server run tries."""
POOLING_QUICK: Final = ("max_num_seqs",)
"""The dimensions a Quick run of a pooling (embedding) model tries."""
_GIB: Final = 1024**3
_DTYPE_BYTES: Final = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "float8": 1}


@dataclass(frozen=True)
class ModelShape:
    """What the KV gate and the MTP gate need to know of a checkpoint.

    Attributes:
        layers: the attention layers (``num_hidden_layers``).
        kv_heads: the key/value heads per layer (``num_key_value_heads``, else the attention heads).
        head_dim: one head's width (``head_dim``, else ``hidden_size / num_attention_heads``).
        dtype_bytes: the bytes of one element at ``auto`` (the checkpoint's dtype; 2 when unstated).
        weights_bytes: the weights' size on disk, None when unknown.
        mtp_layers: ``num_nextn_predict_layers`` / ``mtp_num_hidden_layers`` (0: no MTP).
    """

    layers: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int = 2
    weights_bytes: int | None = None
    mtp_layers: int = 0

    @classmethod
    def from_config(cls, config: Mapping[str, Any], *, weights_bytes: int | None = None) -> ModelShape | None:
        """Read a Hugging Face ``config.json`` (a multimodal one's ``text_config``); None: no shape in it."""
        text = config.get("text_config")
        source: Mapping[str, Any] = text if isinstance(text, Mapping) else config

        def count(*names: str) -> int | None:
            for name in names:
                value = source.get(name, config.get(name))
                if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                    return value
            return None

        layers = count("num_hidden_layers", "n_layer", "num_layers")
        heads = count("num_attention_heads", "n_head")
        kv_heads = count("num_key_value_heads", "num_kv_heads") or heads
        hidden = count("hidden_size", "n_embd", "d_model")
        head_dim = count("head_dim") or (hidden // heads if hidden and heads else None)
        if not (layers and kv_heads and head_dim):
            return None
        dtype = source.get("torch_dtype", source.get("dtype", config.get("torch_dtype")))
        mtp = count("mtp_num_hidden_layers", "num_nextn_predict_layers") or 0
        return cls(
            layers=layers,
            kv_heads=kv_heads,
            head_dim=head_dim,
            dtype_bytes=_DTYPE_BYTES.get(str(dtype).lower(), 2),
            weights_bytes=weights_bytes,
            mtp_layers=mtp,
        )

    @classmethod
    def from_gguf(cls, info: GgufInfo) -> ModelShape | None:
        """Read a GGUF header (vLLM serves GGUF files too); the KV at auto is f16 there."""
        kv_heads, dims = info.kv_head_count(), info.head_dims()
        if not (info.block_count and kv_heads and dims):
            return None
        return cls(
            layers=info.block_count,
            kv_heads=kv_heads,
            head_dim=max(dims),
            weights_bytes=info.size_bytes or None,
        )


def kv_cache_bytes_per_token(shape: ModelShape, kv_cache_dtype: str = "auto") -> int:
    """The KV cache bytes one token takes: K and V rows of every layer, in ``kv_cache_dtype``."""
    element = 1 if kv_cache_dtype.startswith("fp8") else shape.dtype_bytes
    return 2 * shape.layers * shape.kv_heads * shape.head_dim * element


def kv_auto_fits(definition: ModelDefinition, shape: ModelShape | None) -> bool | None:
    """Whether the budget, less the weights, holds one full-length request's KV cache at ``auto``.

    None when it cannot be told (no shape, or the weights' size unknown).
    """
    return _kv_fits(definition, shape)


def _kv_fits(definition: ModelDefinition, shape: ModelShape | None) -> bool | None:
    if shape is None or shape.weights_bytes is None:
        return None
    room = definition.memory_budget_gib * _GIB - shape.weights_bytes
    return room >= kv_cache_bytes_per_token(shape) * definition.max_model_len


@dataclass(frozen=True)
class Dimension:
    """One setting a run varies.

    Attributes:
        name: the step's name (what a request's ``steps`` lists).
        values: the values tried, in order.
        apply: writes a value onto a definition (the result is normalized by the caller).
        goal: what trying it is for, in words.
        tradeoff: what it may cost.
        explain: a candidate's own goal and tradeoff by value (None: the dimension's).
        follow_up: for a step decided by the run so far (the PIECEWISE follow-ups, the refinement):
            the values to try from the candidates tried and the best definition; ``values`` is then
            what the plan preview shows.
    """

    name: str
    values: tuple[Value, ...]
    apply: Callable[[ModelDefinition, Value], ModelDefinition]
    goal: str = ""
    tradeoff: str = ""
    explain: Callable[[Value], tuple[str, str]] | None = None
    follow_up: Callable[[Sequence[TuningCandidate], ModelDefinition], tuple[Value, ...]] | None = None

    def values_for(self, tried: Sequence[TuningCandidate], best: ModelDefinition) -> tuple[Value, ...]:
        """The values to try now: a follow-up's from the run so far, else the planned ones."""
        return self.follow_up(tried, best) if self.follow_up is not None else self.values

    def sentences(self, value: Value) -> tuple[str, str]:
        """The goal and tradeoff of the candidate ``value`` (the dimension's when it has none of its own)."""
        return self.explain(value) if self.explain is not None else (self.goal, self.tradeoff)

    def candidate(self, definition: ModelDefinition, value: Value) -> ModelDefinition:
        """``definition`` normalized (its raw owned flags lifted first), with ``value`` set on top."""
        return normalize_definition(self.apply(normalize_definition(definition), value))

    def describe(self, value: Value) -> str:
        """The candidate in words (the live progress and the result rows show it)."""
        return f"{self.name} = {'default' if value is None else value}"


@dataclass(frozen=True)
class TuningPlan:
    """The dimensions of a run in the order they are tried, and what the gates left out (and why)."""

    dimensions: tuple[Dimension, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def steps(self) -> list[str]:
        """The dimensions' names, in order."""
        return [dimension.name for dimension in self.dimensions]

    @property
    def candidates(self) -> int:
        """The candidates planned (duplicates included), the baseline excluded."""
        return sum(len(dimension.values) for dimension in self.dimensions)


def fingerprint(definition: ModelDefinition) -> str:
    """The config hash of ``definition``'s effective configuration: equal for duplicate candidates."""
    return launch_spec_for(normalize_definition(definition)).config_hash


def effective_config(definition: ModelDefinition) -> str:
    """The normalized settings tuning may change, in one line.

    The preset search's switches (prefix caching, async scheduling, the CUDA graph mode, the mamba
    cache mode) are shown once set: left unset, vLLM's default applies and there is nothing to show.
    """
    model = normalize_definition(definition)
    parts = [f"max-num-seqs={model.max_num_seqs}", f"kv={model.kv_cache_dtype}"]
    if model.max_num_batched_tokens is not None:
        parts.append(f"batched-tokens={model.max_num_batched_tokens}")
    if model.runtime == "vllm":
        spec = model.speculative
        parts.append(
            f"speculative={spec.method}:{spec.num_speculative_tokens}" if spec else "speculative=off"
        )
        parts += _vllm_switches(model)
    return " ".join([*parts, *model.extra_args])


def _vllm_switches(model: ModelDefinition) -> list[str]:
    parts = []
    for name, value in (
        ("prefix-caching", model.enable_prefix_caching),
        ("async-scheduling", model.async_scheduling),
    ):
        if value is not None:
            parts.append(f"{name}={'on' if value else 'off'}")
    if model.cudagraph_mode is not None:
        parts.append(f"cudagraph={model.cudagraph_mode}")
    if model.mamba_cache_mode is not None:
        parts.append(f"mamba-cache={model.mamba_cache_mode}")
    return parts


def _spelled(name: str) -> set[str]:
    return {name, name.replace("-", "_")}


def set_extra_flag(extra_args: Sequence[str], names: Sequence[str], value: str | None) -> list[str]:
    """``extra_args`` with every spelling of the flag ``names`` removed, then ``names[0] value`` added.

    A flag's value may follow it, be joined with ``=`` or share one element (``"--threads 4"``).
    ``value`` None only removes the flag (the server's default then applies).
    """
    spellings = set().union(*(_spelled(name) for name in names))
    kept: list[str] = []
    skip_value = False
    for element in extra_args:
        if skip_value:
            skip_value = False
            if not element.startswith("-"):
                continue
        head = element.split("=", 1)[0].split(" ", 1)[0]
        if head in spellings:
            skip_value = element == head
            continue
        kept.append(element)
    return kept if value is None else [*kept, names[0], value]


def extra_flag_value(extra_args: Sequence[str], names: Sequence[str]) -> str | None:
    """The value the last spelling of the flag ``names`` in ``extra_args`` gives (None: not there)."""
    spellings = set().union(*(_spelled(name) for name in names))
    value = None
    for index, element in enumerate(extra_args):
        for separator in ("=", " "):
            head, joined, rest = element.partition(separator)
            if joined and head in spellings:
                value = rest.strip()
                break
        else:
            if element in spellings and index + 1 < len(extra_args):
                value = extra_args[index + 1]
    return value


_TUNED_FIELDS: Final = ("max_num_seqs", "max_num_batched_tokens", "kv_cache_dtype", "speculative")
_TUNED_LLAMACPP_FLAGS: Final = (("--threads", "-t"), ("--ubatch-size", "-ub"), ("--flash-attn", "-fa"))


def apply_best(saved: ModelDefinition, best: ModelDefinition) -> ModelDefinition:
    """The normalized definition Apply best saves: ``best``'s tuned settings onto ``saved`` as it is now.

    Only the settings tuning owns are taken (everything else the user may have changed since the run
    stays); no owned flag is left in ``extraArgs``.
    """
    model = normalize_definition(saved)
    tuned = normalize_definition(best)
    extra = list(model.extra_args)
    if model.runtime == "llamacpp":
        for names in _TUNED_LLAMACPP_FLAGS:
            extra = set_extra_flag(extra, names, extra_flag_value(tuned.extra_args, names))
    update = {name: getattr(tuned, name) for name in _TUNED_FIELDS}
    return normalize_definition(model.model_copy(update={**update, "extra_args": extra}))


def _field(name: str) -> Callable[[ModelDefinition, Value], ModelDefinition]:
    def apply(definition: ModelDefinition, value: Value) -> ModelDefinition:
        return definition.model_copy(update={name: value})

    return apply


def _extra(*names: str) -> Callable[[ModelDefinition, Value], ModelDefinition]:
    def apply(definition: ModelDefinition, value: Value) -> ModelDefinition:
        text = None if value is None else str(value)
        return definition.model_copy(
            update={"extra_args": set_extra_flag(definition.extra_args, names, text)}
        )

    return apply


def _speculative(definition: ModelDefinition, value: Value) -> ModelDefinition:
    if value == "off":
        return definition.model_copy(update={"speculative": None})
    depth = int(str(value).removeprefix("mtp-"))
    return definition.model_copy(
        update={"speculative": SpeculativeDecoding(method="mtp", num_speculative_tokens=depth)}
    )


def vllm_dimensions(*, mtp_layers: int = 0, kv_auto_fits: bool | None = None) -> TuningPlan:
    """VLLM's classic dimensions, gated without measuring.

    Args:
        mtp_layers: the model's ``mtp_num_hidden_layers`` (MTP depths are tried only when > 0).
        kv_auto_fits: whether the budget admits one full-length request with the KV cache at ``auto``;
            the KV dimension is tried only when it does (None: unknown, so it is skipped).
    """
    notes = []
    speculative: tuple[Value, ...] = ("off",)
    if mtp_layers > 0:
        speculative += ("mtp-1", "mtp-2", "mtp-3")
    else:
        notes.append("speculative: MTP not tried (the model has no MTP layers)")
    dimensions = [
        Dimension(
            "speculative", speculative, _speculative, "faster single-user decoding", "draft work per step"
        ),
        Dimension("max_num_seqs", (8, 16, 32), _field("max_num_seqs"), "more parallel requests", "KV memory"),
        Dimension(
            "max_num_batched_tokens",
            (2048, 8192, 16384),
            _field("max_num_batched_tokens"),
            "faster prefill and batching",
            "latency of decodes sharing a step",
        ),
    ]
    if kv_auto_fits:
        dimensions.append(
            Dimension("kv_cache_dtype", ("fp8", "auto"), _field("kv_cache_dtype"), "more KV room", "accuracy")
        )
    else:
        why = "unknown" if kv_auto_fits is None else "no"
        notes.append(
            f"kv_cache_dtype: not tried (whether the budget fits a full-length request at auto: {why})"
        )
    return TuningPlan(tuple(dimensions), tuple(notes))


def pooling_dimensions() -> TuningPlan:
    """A pooling (embedding) model's dimensions: only max num seqs and max batched tokens (the spec)."""
    dimensions = (
        Dimension(
            "max_num_seqs", (4, 8, 16, 32, 64), _field("max_num_seqs"), "more parallel batches", "KV memory"
        ),
        Dimension(
            "max_num_batched_tokens",
            (2048, 8192, 32768),
            _field("max_num_batched_tokens"),
            "more inputs per step",
            "latency of the batches sharing a step",
        ),
    )
    return TuningPlan(dimensions, ("pooling model: only max num seqs and max batched tokens are tuned",))


def llamacpp_dimensions(*, cpu_count: int = 2) -> TuningPlan:
    """llama-server's dimensions (beyond the spec: a CPU-only fleet tunes too).

    Args:
        cpu_count: the node's CPU cores (the thread counts tried are half and all of them).
    """
    threads = tuple(sorted({max(1, cpu_count // 2), max(1, cpu_count)}))
    dimensions = (
        Dimension(
            "parallel", (1, 2, 4), _field("max_num_seqs"), "more parallel requests", "KV memory per slot"
        ),
        Dimension("threads", threads, _extra("--threads", "-t"), "faster decoding", "CPU left to others"),
        Dimension("batch_size", (512, 2048), _field("max_num_batched_tokens"), "faster prefill", "memory"),
        Dimension("ubatch_size", (128, 512), _extra("--ubatch-size", "-ub"), "faster prefill", "memory"),
        Dimension(
            "flash_attn", ("on", "off"), _extra("--flash-attn", "-fa"), "faster attention", "none known"
        ),
        Dimension("kv_cache_dtype", ("f16", "q8_0"), _field("kv_cache_dtype"), "more KV room", "accuracy"),
    )
    return TuningPlan(dimensions)


def plan_for(
    definition: ModelDefinition,
    *,
    search: TuningSearch = "quick",
    steps: Sequence[str] | None = None,
    cpu_count: int = 2,
    mtp_layers: int = 0,
    kv_auto_fits: bool | None = None,
    shape: ModelShape | None = None,
    pooling: bool = False,
) -> TuningPlan:
    """The plan for ``definition``'s runtime: Quick or Full, or exactly ``steps`` (in the engine's order).

    Args:
        definition: the saved definition.
        search: Quick or Full (ignored when ``steps`` is given).
        steps: exactly these dimensions.
        cpu_count: the node's cores (llama-server's thread counts).
        mtp_layers: the model's MTP layers, when ``shape`` does not say.
        kv_auto_fits: the KV gate, when ``shape`` does not decide it.
        shape: the checkpoint's shape: the KV gate (:func:`kv_auto_fits`) and the MTP layers from it.
        pooling: an embedding model (a vLLM one tunes :func:`pooling_dimensions`).

    Raises:
        UnknownTuningStepError: ``steps`` names dimensions the runtime does not have (all of them named).
        NoTuningStepsError: ``steps`` is an empty list (a run that would try nothing).
    """
    if shape is not None:
        mtp_layers = shape.mtp_layers or mtp_layers
        gate = _kv_fits(definition, shape)
        kv_auto_fits = gate if gate is not None else kv_auto_fits
    quick: tuple[str, ...]
    if definition.runtime == "llamacpp":
        full, quick = llamacpp_dimensions(cpu_count=cpu_count), LLAMACPP_QUICK
    elif pooling:
        full, quick = pooling_dimensions(), POOLING_QUICK
    else:
        full, quick = vllm_dimensions(mtp_layers=mtp_layers, kv_auto_fits=kv_auto_fits), VLLM_QUICK
    known = full.steps if pooling and definition.runtime != "llamacpp" else _known_steps(definition.runtime)
    if steps is not None:
        if not steps:
            raise NoTuningStepsError(known)
        unknown = [step for step in steps if step not in known]
        if unknown:
            raise UnknownTuningStepError(unknown, known)
    chosen = set(steps) if steps is not None else (set(quick) if search == "quick" else set(known))
    return TuningPlan(tuple(d for d in full.dimensions if d.name in chosen), full.notes)


def _known_steps(runtime: str) -> list[str]:
    if runtime == "llamacpp":
        return llamacpp_dimensions().steps
    return vllm_dimensions(mtp_layers=1, kv_auto_fits=True).steps
