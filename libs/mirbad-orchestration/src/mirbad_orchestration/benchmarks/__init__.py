"""Benchmarks: the load generator, the classic suite and the results store.

:class:`ClassicSuite` measures one model through a :class:`ChatEndpoint` (streamed chats at N = 1, 4,
8, 16, a long prefill sent twice, a tool call and eight objective questions); :class:`BenchmarkResults`
keeps each result as ``{data}/benchmarks/{modelId}/{yyyyMMddTHHmmssZ}.json``. Jobs
(:mod:`mirbad_orchestration.jobs`) run the suite with the node in maintenance.
"""

from ._checks import OBJECTIVE_QUESTIONS, TOOL_CALL_REQUEST, ObjectiveQuestion, score_tool_call
from ._load import ChatEndpoint, StreamedChat, measure_run, post_chat, stream_chat
from ._results import BENCHMARKS_FOLDER_NAME, BenchmarkResults, result_stamp
from ._stats import median, nearest_rank
from ._suite import CLASSIC_PROMPTS, ClassicSuite, NoiseCheck, Progress, SuiteOutcome

__all__ = [
    "BENCHMARKS_FOLDER_NAME",
    "CLASSIC_PROMPTS",
    "OBJECTIVE_QUESTIONS",
    "TOOL_CALL_REQUEST",
    "BenchmarkResults",
    "ChatEndpoint",
    "ClassicSuite",
    "NoiseCheck",
    "ObjectiveQuestion",
    "Progress",
    "StreamedChat",
    "SuiteOutcome",
    "measure_run",
    "median",
    "nearest_rank",
    "post_chat",
    "result_stamp",
    "score_tool_call",
    "stream_chat",
]
