"""The workload-preset search's plan: phases 1-3, the PIECEWISE follow-ups and the refinement.

The search is a coordinate descent on top of the best configuration so far (the engine's), over
these steps in order, each value gated without measuring (:mod:`._gates`):

1. ``kv_prefix``: KV {fp8, auto} x prefix caching {on, off}; both prefix configurations always (a
   Mamba hybrid pairs on with ``--mamba-cache-mode align``, off with ``none``).
2. ``max_num_seqs`` {4 … 64} (1 and 2 too for a dense model over 20 B), then
   ``max_num_batched_tokens`` {2048 … 32768, the saved value}.
3. ``speculative`` {off, saved, MTP 1/2/3/5 or the drafter's depths}, with FULL_AND_PIECEWISE graphs
   when ``cudagraph_mode`` is selected; then ``cudagraph_mode``: PIECEWISE follow-ups only for a
   full-graph candidate that failed and for the two best depths; then ``async_scheduling`` {on, off}.
4. The refinement: ``refine_max_num_seqs`` (the neighbours of the winning max num seqs),
   ``refine_speculative`` (of the winning depth), everything else fixed; then ``refine_prefix``:
   prefix on/off with the winning decode settings.

Quick searches {max num seqs, speculative} (and their refinements); Full every step; explicit steps
exactly those. A pooling model keeps the phase-A plan (max num seqs, max batched tokens). Every step
and candidate carries a goal and a tradeoff sentence (the plan preview, the live progress and the
result rows show them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from mirbad_orchestration.exceptions import NoTuningStepsError, UnknownTuningStepError
from mirbad_protocol import ModelDefinition, SpeculativeDecoding
from mirbad_protocol.tuning import TuningCandidate, TuningSearch

from ._dimensions import Dimension, TuningPlan, Value
from ._gates import (
    batched_tokens_gate,
    draft_depth_gate,
    drafter_block_size,
    estimated_parameters_b,
    kv_gate,
    max_num_seqs_gate,
    mtp_gate,
    prefix_pairs,
)

__all__ = [
    "POOLING_STEPS",
    "PRESET_QUICK",
    "PRESET_STEPS",
    "GateInputs",
    "preset_plan",
    "step_sentences",
]

PRESET_STEPS: Final = (
    "kv_prefix",
    "max_num_seqs",
    "max_num_batched_tokens",
    "speculative",
    "cudagraph_mode",
    "async_scheduling",
)
"""The steps a request may name (the refinement follows from them)."""
PRESET_QUICK: Final = ("max_num_seqs", "speculative")
"""Quick's steps."""
POOLING_STEPS: Final = ("max_num_seqs", "max_num_batched_tokens")
"""A pooling model's steps (phase A)."""
_FULL_GRAPHS: Final = "FULL_AND_PIECEWISE"
_PIECEWISE: Final = "PIECEWISE"
_MAX_REFINED_SEQS: Final = 128
_MTP_DEPTH_CAP: Final = 8

_STEP_SENTENCES: Final[Mapping[str, tuple[str, str]]] = {
    "kv_prefix": (
        "Fit more tokens in the KV cache and reuse repeated prompt prefixes.",
        "FP8 KV may cost a little accuracy; prefix caching costs memory for prompts never repeated.",
    ),
    "max_num_seqs": (
        "Serve more requests in parallel for a higher aggregate speed.",
        "More parallel sequences share each step: single requests get slower and KV memory runs out sooner.",
    ),
    "max_num_batched_tokens": (
        "Prefill long prompts in fewer, larger steps.",
        "Decodes sharing a step with a large prefill chunk wait longer (higher inter-token latency).",
    ),
    "speculative": (
        "Decode faster for a single user by drafting tokens the model verifies.",
        "Draft work per step costs throughput when many requests run; rejected drafts are wasted work.",
    ),
    "cudagraph_mode": (
        "Keep CUDA graphs where full graphs fail or are downgraded with speculative decoding.",
        "PIECEWISE graphs launch more kernels per step than full graphs.",
    ),
    "async_scheduling": (
        "Overlap scheduling with the model's forward pass.",
        "Not every feature supports it; vLLM may switch it off (RuntimeNotes say so).",
    ),
    "refine_max_num_seqs": (
        "Try the values next to the winning max num seqs, everything else fixed.",
        "Small gains, one start each.",
    ),
    "refine_speculative": (
        "Try the depths next to the winning speculative depth, everything else fixed.",
        "Small gains, one start each.",
    ),
    "refine_prefix": (
        "Check prefix caching on and off again with the winning decode settings.",
        "Prefix caching costs memory for prompts never repeated.",
    ),
}


def step_sentences(step: str) -> tuple[str, str]:
    """A step's goal and tradeoff sentences ("" for an unknown step)."""
    return _STEP_SENTENCES.get(step, ("", ""))


@dataclass(frozen=True)
class GateInputs:
    """What the gates know before the first start.

    Attributes:
        config: the model's ``config.json``.
        drafter_config: the draft model's ``config.json`` (None: unknown or none).
        drafter_unknown: why the draft model's ``config.json`` is unknown (the plan's note says it).
        mtp_architectures: the MTP architectures the image registers (empty: the pinned vLLM's list,
            :data:`~mirbad_orchestration.tuning.VLLM_MTP_ARCHITECTURES`).
        kv_auto_fits: the memory gate's verdict on KV ``auto`` (None: unknown).
        weights_bytes: the weights' size on disk.
        weights_format: their format (``bf16``, ``fp8``, ``awq`` …; None: bf16).
        pooling: a pooling (embedding) model.
        tags: the model's registry tags (``hybrid`` and ``moe`` stand in for a ``config.json``).
    """

    config: Mapping[str, Any] = field(default_factory=dict)
    drafter_config: Mapping[str, Any] | None = None
    drafter_unknown: str | None = None
    mtp_architectures: tuple[str, ...] = ()
    kv_auto_fits: bool | None = None
    weights_bytes: int | None = None
    weights_format: str | None = None
    pooling: bool = False
    tags: tuple[str, ...] = ()

    @classmethod
    def from_tags(cls, definition: ModelDefinition) -> GateInputs:
        """What is known without the node's files: the registry's tags and a saved mamba cache mode."""
        hybrid = ("hybrid",) if definition.mamba_cache_mode not in (None, "none") else ()
        return cls(tags=(*definition.tags, *hybrid))

    @property
    def hybrid(self) -> bool:
        """Whether the tags say the model mixes Mamba layers in (``config.json`` is read besides)."""
        return "hybrid" in self.tags

    @property
    def moe(self) -> bool:
        """Whether the tags say the model routes over experts."""
        return "moe" in self.tags


def _field(name: str) -> Any:
    def apply(definition: ModelDefinition, value: Value) -> ModelDefinition:
        return definition.model_copy(update={name: value})

    return apply


def _prefix_update(on: bool, mamba: str | None) -> dict[str, Any]:
    return {"enable_prefix_caching": on, "mamba_cache_mode": mamba}


def _kv_prefix_dimension(gates: GateInputs, notes: list[str]) -> Dimension:
    kv = kv_gate(gates.kv_auto_fits)
    if kv.note:
        notes.append(f"kv_prefix: {kv.note}")
    pairs = dict(prefix_pairs(gates.config, hybrid=gates.hybrid))
    values = tuple(f"{dtype}/prefix-{'on' if on else 'off'}" for dtype in kv.values for on in (True, False))

    def apply(definition: ModelDefinition, value: Value) -> ModelDefinition:
        dtype, prefix = str(value).split("/")
        on = prefix == "prefix-on"
        return definition.model_copy(update={"kv_cache_dtype": dtype, **_prefix_update(on, pairs[on])})

    def explain(value: Value) -> tuple[str, str]:
        dtype, prefix = str(value).split("/")
        goal = (
            "Fit more tokens in the KV cache." if dtype == "fp8" else "Keep the KV cache at full precision."
        )
        tradeoff = "May cost a little accuracy." if dtype == "fp8" else "Fewer tokens fit in the KV cache."
        if prefix == "prefix-on":
            goal += " Reuse repeated prompt prefixes."
            tradeoff += " Cached prefixes take memory."
        else:
            goal += " Spend no memory on prefix caching."
            tradeoff += " Repeated prompts are prefilled again."
        return goal, tradeoff

    goal, tradeoff = step_sentences("kv_prefix")
    return Dimension("kv_prefix", values, apply, goal, tradeoff, explain)


def _speculative_values(saved: ModelDefinition, gates: GateInputs, notes: list[str]) -> tuple[Value, ...]:
    values: list[Value] = ["off"]
    if saved.speculative is not None:
        values.append("saved")
    mtp = mtp_gate(gates.config, gates.mtp_architectures, saved)
    if mtp.note:
        notes.append(f"speculative: {mtp.note}")
    values += [f"mtp-{depth}" for depth in mtp.values]
    if (
        saved.speculative is not None
        and saved.speculative.model is not None
        and saved.speculative.method != "mtp"
    ):
        draft = draft_depth_gate(saved, gates.drafter_config, unknown=gates.drafter_unknown)
        if draft.note:
            notes.append(f"speculative: {draft.note}")
        values += [f"draft-{depth}" for depth in draft.values]
    return tuple(values)


def _set_speculative(saved: ModelDefinition, definition: ModelDefinition, value: Value) -> ModelDefinition:
    text = str(value)
    if text == "off":
        return definition.model_copy(update={"speculative": None})
    if text == "saved":
        return definition.model_copy(update={"speculative": saved.speculative})
    kind, depth = text.rsplit("-", 1)
    if kind == "mtp":
        spec = SpeculativeDecoding(method="mtp", num_speculative_tokens=int(depth))
    else:
        base = saved.speculative or SpeculativeDecoding()
        spec = base.model_copy(update={"num_speculative_tokens": int(depth)})
    return definition.model_copy(update={"speculative": spec})


def _speculative_dimension(saved: ModelDefinition, values: tuple[Value, ...], graphs: bool) -> Dimension:
    def apply(definition: ModelDefinition, value: Value) -> ModelDefinition:
        changed = _set_speculative(saved, definition, value)
        return changed.model_copy(update={"cudagraph_mode": _FULL_GRAPHS}) if graphs else changed

    def explain(value: Value) -> tuple[str, str]:
        if value == "off":
            return (
                "Decode without drafting: every step serves the requests only.",
                "Single requests decode slower.",
            )
        if value == "saved":
            return (
                "The saved speculative config, measured with this run's other settings.",
                "Its draft work per step.",
            )
        depth = str(value).rsplit("-", 1)[1]
        return (
            f"Draft {depth} tokens per step for faster single-user decoding.",
            "Deeper drafts are rejected more often and cost throughput under load.",
        )

    goal, tradeoff = step_sentences("speculative")
    return Dimension("speculative", values, apply, goal, tradeoff, explain)


def _piecewise_follow_up(saved: ModelDefinition, values: tuple[Value, ...]) -> Dimension:
    """PIECEWISE for a full-graph speculative candidate that failed and for the two best depths."""

    def apply(definition: ModelDefinition, value: Value) -> ModelDefinition:
        return _set_speculative(saved, definition, value).model_copy(update={"cudagraph_mode": _PIECEWISE})

    def follow_up(tried: Sequence[TuningCandidate], best: ModelDefinition) -> tuple[Value, ...]:
        rows = [row for row in tried if row.step == "speculative" and row.changes.get("speculative") != "off"]
        failed = [row.changes["speculative"] for row in rows if row.outcome == "failed"]
        scored = sorted(
            (row for row in rows if row.outcome == "accepted" and row.score is not None),
            key=lambda row: row.score or 0.0,
            reverse=True,
        )
        best_two = [row.changes["speculative"] for row in scored[:2]]
        chosen = dict.fromkeys(str(value) for value in [*failed, *best_two])
        return tuple(value for value in values if str(value) in chosen)

    def explain(value: Value) -> tuple[str, str]:
        return (
            f"{value} with PIECEWISE CUDA graphs (full graphs failed or may be downgraded).",
            "PIECEWISE graphs launch more kernels per step.",
        )

    goal, tradeoff = step_sentences("cudagraph_mode")
    return Dimension("cudagraph_mode", values, apply, goal, tradeoff, explain, follow_up=follow_up)


def _async_dimension() -> Dimension:
    def apply(definition: ModelDefinition, value: Value) -> ModelDefinition:
        return definition.model_copy(update={"async_scheduling": value == "on"})

    goal, tradeoff = step_sentences("async_scheduling")
    return Dimension("async_scheduling", ("on", "off"), apply, goal, tradeoff)


def _neighbours_of_seqs(best: ModelDefinition, grid: tuple[Value, ...]) -> tuple[Value, ...]:
    winner = best.max_num_seqs
    points = sorted({int(value) for value in grid if isinstance(value, int)} | {winner})
    index = points.index(winner)
    found = []
    if index > 0:
        found.append((points[index - 1] + winner) // 2)
    found.append((winner + points[index + 1]) // 2 if index + 1 < len(points) else winner * 3 // 2)
    return tuple(
        value for value in dict.fromkeys(found) if 0 < value <= _MAX_REFINED_SEQS and value != winner
    )


def _refine_seqs_dimension(grid: tuple[Value, ...]) -> Dimension:
    def follow_up(tried: Sequence[TuningCandidate], best: ModelDefinition) -> tuple[Value, ...]:
        return _neighbours_of_seqs(best, grid)

    goal, tradeoff = step_sentences("refine_max_num_seqs")
    return Dimension(
        "refine_max_num_seqs", ("±",), _field("max_num_seqs"), goal, tradeoff, follow_up=follow_up
    )


def _refine_speculative_dimension(saved: ModelDefinition, gates: GateInputs) -> Dimension:
    cap = drafter_block_size(gates.drafter_config or {}) or _MTP_DEPTH_CAP

    def apply(definition: ModelDefinition, value: Value) -> ModelDefinition:
        return _set_speculative(saved, definition, value)

    def follow_up(tried: Sequence[TuningCandidate], best: ModelDefinition) -> tuple[Value, ...]:
        spec = best.speculative
        if spec is None or not spec.num_speculative_tokens:
            return ()
        kind = "mtp" if spec.method == "mtp" else "draft"
        depth = spec.num_speculative_tokens
        return tuple(f"{kind}-{d}" for d in (depth - 1, depth + 1) if 0 < d <= cap)

    goal, tradeoff = step_sentences("refine_speculative")
    return Dimension("refine_speculative", ("±",), apply, goal, tradeoff, follow_up=follow_up)


def _refine_prefix_dimension(gates: GateInputs) -> Dimension:
    pairs = dict(prefix_pairs(gates.config, hybrid=gates.hybrid))

    def apply(definition: ModelDefinition, value: Value) -> ModelDefinition:
        on = value == "prefix-on"
        return definition.model_copy(update=_prefix_update(on, pairs[on]))

    goal, tradeoff = step_sentences("refine_prefix")
    return Dimension("refine_prefix", ("prefix-on", "prefix-off"), apply, goal, tradeoff)


def _seqs_dimension(gates: GateInputs, *, pooling: bool) -> Dimension:
    parameters = None if pooling else estimated_parameters_b(gates.weights_bytes, gates.weights_format)
    verdict = max_num_seqs_gate(gates.config, parameters, moe=gates.moe)
    goal, tradeoff = step_sentences("max_num_seqs")
    return Dimension("max_num_seqs", verdict.values, _field("max_num_seqs"), goal, tradeoff)


def _batched_dimension(saved: ModelDefinition, notes: list[str]) -> Dimension:
    verdict = batched_tokens_gate(saved)
    if verdict.note:
        notes.append(f"max_num_batched_tokens: {verdict.note}")
    goal, tradeoff = step_sentences("max_num_batched_tokens")
    return Dimension(
        "max_num_batched_tokens", verdict.values, _field("max_num_batched_tokens"), goal, tradeoff
    )


def preset_plan(
    saved: ModelDefinition,
    gates: GateInputs,
    *,
    search: TuningSearch = "quick",
    steps: Sequence[str] | None = None,
) -> TuningPlan:
    """The workload-preset search's plan for ``saved`` (see the module).

    Raises:
        UnknownTuningStepError: ``steps`` names a step the search does not have (all of them named).
        NoTuningStepsError: ``steps`` is an empty list (a run that would try nothing).
    """
    known = list(POOLING_STEPS if gates.pooling else PRESET_STEPS)
    if steps is not None:
        if not steps:
            raise NoTuningStepsError(known)
        unknown = [step for step in steps if step not in known]
        if unknown:
            raise UnknownTuningStepError(unknown, known)
    chosen = (
        set(steps)
        if steps is not None
        else (set(known) if search == "full" or gates.pooling else set(PRESET_QUICK))
    )
    notes: list[str] = []
    seqs = _seqs_dimension(gates, pooling=gates.pooling)
    if gates.pooling:
        phase_a = [seqs, _batched_dimension(saved, notes)]
        return TuningPlan(tuple(d for d in phase_a if d.name in chosen), tuple(notes))
    graphs = "cudagraph_mode" in chosen
    # The speculative gates' notes belong to a plan that tries speculative depths, not to any plan.
    tries_depths = bool({"speculative", "cudagraph_mode"} & chosen)
    speculative = _speculative_values(saved, gates, notes if tries_depths else [])
    dimensions: list[Dimension] = []
    if "kv_prefix" in chosen:
        dimensions.append(_kv_prefix_dimension(gates, notes))
    if "max_num_seqs" in chosen:
        dimensions.append(seqs)
    if "max_num_batched_tokens" in chosen:
        dimensions.append(_batched_dimension(saved, notes))
    if "speculative" in chosen:
        dimensions.append(_speculative_dimension(saved, speculative, graphs))
    if graphs:
        depths = tuple(value for value in speculative if value != "off")
        if depths:
            dimensions.append(_piecewise_follow_up(saved, depths))
        else:
            notes.append("cudagraph_mode: no speculative depth to follow up")
    if "async_scheduling" in chosen:
        dimensions.append(_async_dimension())
    if "max_num_seqs" in chosen:
        dimensions.append(_refine_seqs_dimension(seqs.values))
    if "speculative" in chosen and len(speculative) > 1:
        dimensions.append(_refine_speculative_dimension(saved, gates))
    if "kv_prefix" in chosen and ({"max_num_seqs", "speculative"} & chosen):
        dimensions.append(_refine_prefix_dimension(gates))
    return TuningPlan(tuple(dimensions), tuple(notes))
