"""Benchmarks: the load generator, the classic suite and the results store.

:class:`ClassicSuite` measures one model through a :class:`ChatEndpoint` (streamed chats at N = 1, 4,
8, 16, a long prefill sent twice, a tool call and eight objective questions); :class:`BenchmarkResults`
keeps each result as ``{data}/benchmarks/{modelId}/{yyyyMMddTHHmmssZ}.json``. The workload presets
(:data:`WORKLOAD_PRESETS`) name their workloads, score components, weights and guards;
:func:`score_run` and :func:`check_guards` judge a preset run against a baseline. Jobs
(:mod:`mirbad_orchestration.jobs`) run the suite with the node in maintenance.
"""

from ._checks import OBJECTIVE_QUESTIONS, TOOL_CALL_REQUEST, ObjectiveQuestion, score_tool_call
from ._embeddings import EmbeddingsSuite, InputLimit, check_embeddings, embedding_input_limit
from ._load import ChatEndpoint, StreamedChat, measure_run, post_chat, stream_chat
from ._pooling import is_pooling, reranker_reason
from ._preset_suite import PROMPT_SETS, CacheCounter, PresetOutcome, PresetSuite, preset_levels
from ._presets import (
    COMPONENTS,
    WORKLOAD_PRESETS,
    WORKLOADS,
    ScoreComponent,
    WorkloadPreset,
    preset_guards,
    workload_preset,
)
from ._results import BENCHMARK_RESULTS, BENCHMARKS_FOLDER_NAME, BenchmarkResults
from ._score import (
    GuardInputs,
    ScoredComponent,
    WorkloadScore,
    check_guards,
    score_components,
    score_run,
)
from ._stats import median, nearest_rank
from ._suite import CLASSIC_PROMPTS, ClassicSuite, NoiseCheck, Progress, SuiteOutcome
from ._tools import PRESET_TOOL_CASES, ToolCase, check_tool_call

__all__ = [
    "BENCHMARKS_FOLDER_NAME",
    "BENCHMARK_RESULTS",
    "CLASSIC_PROMPTS",
    "COMPONENTS",
    "OBJECTIVE_QUESTIONS",
    "PRESET_TOOL_CASES",
    "PROMPT_SETS",
    "TOOL_CALL_REQUEST",
    "WORKLOADS",
    "WORKLOAD_PRESETS",
    "BenchmarkResults",
    "CacheCounter",
    "ChatEndpoint",
    "ClassicSuite",
    "EmbeddingsSuite",
    "GuardInputs",
    "InputLimit",
    "NoiseCheck",
    "ObjectiveQuestion",
    "PresetOutcome",
    "PresetSuite",
    "Progress",
    "ScoreComponent",
    "ScoredComponent",
    "StreamedChat",
    "SuiteOutcome",
    "ToolCase",
    "WorkloadPreset",
    "WorkloadScore",
    "check_embeddings",
    "check_guards",
    "check_tool_call",
    "embedding_input_limit",
    "is_pooling",
    "measure_run",
    "median",
    "nearest_rank",
    "post_chat",
    "preset_guards",
    "preset_levels",
    "reranker_reason",
    "score_components",
    "score_run",
    "score_tool_call",
    "stream_chat",
    "workload_preset",
]
