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
    POOLING_QUICK,
    VLLM_QUICK,
    Dimension,
    ModelShape,
    TuningPlan,
    apply_best,
    effective_config,
    extra_flag_value,
    fingerprint,
    kv_auto_fits,
    kv_cache_bytes_per_token,
    llamacpp_dimensions,
    plan_for,
    pooling_dimensions,
    set_extra_flag,
    vllm_dimensions,
)
from ._engine import EngineOutcome, TuningEngine, TuningProgress
from ._fleet_runner import FleetModelShapes, FleetTuningRunners
from ._goals import (
    ABSOLUTE_GUARDS,
    GOALS,
    RELATIVE_SLACK,
    Measurement,
    goal_score,
    guard_violations,
    measurement_from_embeddings,
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
from ._jobs import RunnerFactory, ShapeReader, TuningJobs, planned_candidates, planned_seconds
from ._results import TUNING_FOLDER_NAME, TuningResults
from ._runner import CandidateRunner
from ._simulator import PerformanceModel, SimulatedRunner

__all__ = [
    "ABSOLUTE_GUARDS",
    "CLEANUP_TIMEOUT_S",
    "GOALS",
    "LLAMACPP_QUICK",
    "POOLING_QUICK",
    "RELATIVE_SLACK",
    "TUNING_FOLDER_NAME",
    "VLLM_QUICK",
    "AgentTuningInstances",
    "CandidateRunner",
    "Confirmation",
    "Dimension",
    "EngineOutcome",
    "FleetModelShapes",
    "FleetTuningRunners",
    "InstanceCandidateRunner",
    "Measured",
    "Measurement",
    "ModelShape",
    "PerformanceModel",
    "RunnerFactory",
    "ShapeReader",
    "SimulatedRunner",
    "TuningEngine",
    "TuningInstances",
    "TuningJobs",
    "TuningPlan",
    "TuningProgress",
    "TuningResults",
    "apply_best",
    "effective_config",
    "extra_flag_value",
    "fingerprint",
    "goal_score",
    "guard_violations",
    "kv_auto_fits",
    "kv_cache_bytes_per_token",
    "llamacpp_dimensions",
    "measurement_from_embeddings",
    "measurement_from_outcome",
    "plan_for",
    "planned_candidates",
    "planned_seconds",
    "pooling_dimensions",
    "reference_of",
    "relative_guards_for",
    "set_extra_flag",
    "tuning_id",
    "vllm_dimensions",
]
