"""Automatic tuning: coordinate descent over a model's settings, then a confirmation stage.

:func:`plan_for` picks a runtime's dimensions (vLLM's classic order, llama-server's own) for a Quick
or Full run or explicit steps; :class:`TuningEngine` tries them one at a time on top of the best so
far through a :class:`CandidateRunner` (tuning instances on the node, the registry untouched) and lets
the confirmation stage decide whether the best beats the saved settings. :class:`SimulatedRunner` is
a deterministic performance model for tests.
"""

from ._confirmation import Confirmation, Measured
from ._dimensions import (
    LLAMACPP_QUICK,
    VLLM_QUICK,
    Dimension,
    TuningPlan,
    apply_best,
    effective_config,
    extra_flag_value,
    fingerprint,
    llamacpp_dimensions,
    plan_for,
    set_extra_flag,
    vllm_dimensions,
)
from ._engine import EngineOutcome, TuningEngine, TuningProgress
from ._eta import DEFAULT_BENCHMARK_S, DEFAULT_START_S, RECENT_RUNS, EtaBasis, EtaProjection, eta_basis
from ._fleet_runner import FleetTuningRunners
from ._gates import (
    BATCHED_TOKENS,
    DRAFT_DEPTHS,
    MAX_NUM_SEQS,
    MTP_DEPTHS,
    GateVerdict,
    architecture_base,
    batched_tokens_gate,
    chunked_prefill_disabled,
    draft_depth_gate,
    drafter_block_size,
    estimated_parameters_b,
    is_mamba_hybrid,
    is_moe,
    kv_gate,
    max_num_seqs_gate,
    mtp_gate,
    mtp_layers,
    prefix_pairs,
)
from ._goals import (
    ABSOLUTE_GUARDS,
    GOALS,
    RELATIVE_SLACK,
    Measurement,
    goal_score,
    guard_violations,
    measurement_from_outcome,
    reference_of,
    relative_guards_for,
)
from ._instances import (
    CLEANUP_TIMEOUT_S,
    AgentTuningInstances,
    InstanceCandidateRunner,
    TuningInstances,
    tuning_id,
)
from ._jobs import RunnerFactory, TuningJobs, planned_candidates, planned_seconds
from ._preset_search import POOLING_STEPS, PRESET_QUICK, PRESET_STEPS, GateInputs, preset_plan, step_sentences
from ._preset_simulator import PresetSimulatedRunner, SimulatedLog
from ._results import TUNING_FOLDER_NAME, TuningResults
from ._runner import CandidateRunner
from ._runtime_notes import AS_REQUESTED, RuntimeNotes, compare_with_request, parse_runtime_log
from ._scoring import GoalScorer, PresetScorer, TuningScorer
from ._simulator import PerformanceModel, SimulatedRunner

__all__ = [
    "ABSOLUTE_GUARDS",
    "AS_REQUESTED",
    "BATCHED_TOKENS",
    "CLEANUP_TIMEOUT_S",
    "DEFAULT_BENCHMARK_S",
    "DEFAULT_START_S",
    "DRAFT_DEPTHS",
    "GOALS",
    "LLAMACPP_QUICK",
    "MAX_NUM_SEQS",
    "MTP_DEPTHS",
    "POOLING_STEPS",
    "PRESET_QUICK",
    "PRESET_STEPS",
    "RECENT_RUNS",
    "RELATIVE_SLACK",
    "TUNING_FOLDER_NAME",
    "VLLM_QUICK",
    "AgentTuningInstances",
    "CandidateRunner",
    "Confirmation",
    "Dimension",
    "EngineOutcome",
    "EtaBasis",
    "EtaProjection",
    "FleetTuningRunners",
    "GateInputs",
    "GateVerdict",
    "GoalScorer",
    "InstanceCandidateRunner",
    "Measured",
    "Measurement",
    "PerformanceModel",
    "PresetScorer",
    "PresetSimulatedRunner",
    "RunnerFactory",
    "RuntimeNotes",
    "SimulatedLog",
    "SimulatedRunner",
    "TuningEngine",
    "TuningInstances",
    "TuningJobs",
    "TuningPlan",
    "TuningProgress",
    "TuningResults",
    "TuningScorer",
    "apply_best",
    "architecture_base",
    "batched_tokens_gate",
    "chunked_prefill_disabled",
    "compare_with_request",
    "draft_depth_gate",
    "drafter_block_size",
    "effective_config",
    "estimated_parameters_b",
    "eta_basis",
    "extra_flag_value",
    "fingerprint",
    "goal_score",
    "guard_violations",
    "is_mamba_hybrid",
    "is_moe",
    "kv_gate",
    "llamacpp_dimensions",
    "max_num_seqs_gate",
    "measurement_from_outcome",
    "mtp_gate",
    "mtp_layers",
    "parse_runtime_log",
    "plan_for",
    "planned_candidates",
    "planned_seconds",
    "prefix_pairs",
    "preset_plan",
    "reference_of",
    "relative_guards_for",
    "set_extra_flag",
    "step_sentences",
    "tuning_id",
    "vllm_dimensions",
]
