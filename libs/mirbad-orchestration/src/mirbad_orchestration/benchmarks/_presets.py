"""The workload presets (schema v2): which workloads each runs, its score components, weights and guards.

A preset answers one question ("is this faster for interactive chat?"), so it picks the workloads that
matter for it, scores a run against a baseline on a few components and refuses runs that break its
guards. The components and weights are the spec's:

* Interactive chat: short chat tok/s at N=1 .5, at N=16 .2, 16K cold-prompt TTFT .3;
* Agents & tools: N=1 .25, N=16 .3, 16K TTFT .15, shared-prefix TTFT .3;
* Throughput / batch: N=16 .4, the aggregate at the configuration's max num seqs .6;
* Long documents: N=1 .3, 16K TTFT .35, 64K TTFT .35;
* Embeddings: input tok/s at N=1 .4, at N=16 .6.

"N=1" is the per-request decode speed of one user; "N=16" and "max seqs" are aggregate tok/s, what
many users get together (the spec names the aggregate only for max seqs; N=16 reads the same way so
that Throughput's two components measure one thing at two loads).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from mirbad_orchestration.exceptions import UnknownPresetError
from mirbad_protocol.benchmarks import SloGuards

__all__ = [
    "COMPONENTS",
    "WORKLOADS",
    "WORKLOAD_PRESETS",
    "ScoreComponent",
    "WorkloadPreset",
    "preset_guards",
    "workload_preset",
]

WORKLOADS: Final = (
    "short-chat",
    "tool-calls",
    "cold-prompts",
    "shared-prefix",
    "questions",
    "embeddings",
)
"""Every workload a preset can pick (each preset starts with an untimed warm-up)."""


@dataclass(frozen=True)
class ScoreComponent:
    """One measured number a preset scores on.

    Attributes:
        key: the measurement's name in a run's components.
        label: how people read it.
        lower_is_better: a latency, whose candidate ÷ baseline ratio is inverted before scoring.
    """

    key: str
    label: str
    lower_is_better: bool = False


COMPONENTS: Final[Mapping[str, ScoreComponent]] = {
    component.key: component
    for component in (
        ScoreComponent("short_n1_tok_s", "short chat tok/s per request at N=1"),
        ScoreComponent("short_n16_tok_s", "short chat aggregate tok/s at N=16"),
        ScoreComponent("short_max_seqs_tok_s", "short chat aggregate tok/s at max num seqs"),
        ScoreComponent("cold_16k_ttft_s", "cold 16K-token prompt TTFT", lower_is_better=True),
        ScoreComponent("cold_64k_ttft_s", "cold 64K-token prompt TTFT", lower_is_better=True),
        ScoreComponent("shared_prefix_ttft_s", "shared-prefix question TTFT", lower_is_better=True),
        ScoreComponent("embed_n1_input_tok_s", "embeddings input tok/s at N=1"),
        ScoreComponent("embed_n16_input_tok_s", "embeddings input tok/s at N=16"),
    )
}
"""Every score component, by key."""


@dataclass(frozen=True)
class WorkloadPreset:
    """A workload preset.

    Attributes:
        name: its name in the API (``?preset=``).
        label: how the portal names it.
        workloads: the workloads it runs, in order (of :data:`WORKLOADS`).
        weights: the score weight of each component key.
        guards: its default guards.
        pooling: whether it is for pooling (embedding) models rather than generation ones.
    """

    name: str
    label: str
    workloads: tuple[str, ...]
    weights: Mapping[str, float]
    guards: SloGuards
    pooling: bool = False


def _generation_guards(*, latency: bool = True, tools: bool = False) -> SloGuards:
    """The spec's guards of a generation preset; Throughput has no latency guards."""
    if not latency:
        return SloGuards(max_error_rate=0.0, objective_at_least_baseline=True)
    return SloGuards(
        short_ttft_p95_n1_s=1.0,
        short_ttft_p95_n16_s=3.0,
        long_ttft_vs_baseline=1.25,
        max_error_rate=0.0,
        objective_at_least_baseline=True,
        tool_validity=tools,
    )


WORKLOAD_PRESETS: Final[Mapping[str, WorkloadPreset]] = {
    preset.name: preset
    for preset in (
        WorkloadPreset(
            "interactive",
            "Interactive chat",
            ("short-chat", "cold-prompts", "questions"),
            {"short_n1_tok_s": 0.5, "short_n16_tok_s": 0.2, "cold_16k_ttft_s": 0.3},
            _generation_guards(),
        ),
        WorkloadPreset(
            "agents",
            "Agents & tools",
            ("short-chat", "tool-calls", "cold-prompts", "shared-prefix", "questions"),
            {
                "short_n1_tok_s": 0.25,
                "short_n16_tok_s": 0.3,
                "cold_16k_ttft_s": 0.15,
                "shared_prefix_ttft_s": 0.3,
            },
            _generation_guards(tools=True),
        ),
        WorkloadPreset(
            "throughput",
            "Throughput / batch",
            ("short-chat", "questions"),
            {"short_n16_tok_s": 0.4, "short_max_seqs_tok_s": 0.6},
            _generation_guards(latency=False),
        ),
        WorkloadPreset(
            "long-documents",
            "Long documents",
            ("short-chat", "cold-prompts", "questions"),
            {"short_n1_tok_s": 0.3, "cold_16k_ttft_s": 0.35, "cold_64k_ttft_s": 0.35},
            _generation_guards(),
        ),
        WorkloadPreset(
            "embeddings",
            "Embeddings",
            ("embeddings",),
            {"embed_n1_input_tok_s": 0.4, "embed_n16_input_tok_s": 0.6},
            SloGuards(
                max_error_rate=0.0,
                valid_vectors=True,
                unchanged_normalization=True,
                embedding_latency_p95_n16_vs_baseline=2.0,
            ),
            pooling=True,
        ),
    )
}
"""The presets, by name, in the order the portal offers them."""


def workload_preset(name: str) -> WorkloadPreset:
    """The preset called ``name``.

    Raises:
        UnknownPresetError: there is none; the error lists the presets.
    """
    try:
        return WORKLOAD_PRESETS[name]
    except KeyError:
        raise UnknownPresetError(name, list(WORKLOAD_PRESETS)) from None


def preset_guards(preset: WorkloadPreset, overrides: SloGuards | None = None) -> SloGuards:
    """The preset's guards with a job's overrides on top (only the fields the job set)."""
    if overrides is None:
        return preset.guards
    return preset.guards.model_copy(update=overrides.model_dump(exclude_unset=True))
