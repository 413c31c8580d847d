"""Benchmark results and jobs as the admin API and the results files carry them.

A result is what one run of a suite measured (``{data}/benchmarks/{modelId}/{stamp}.json``); a job is
the work that produces it, with its live progress. Both are read by the master, the typed client and
the portal; stored files of an older or newer writer load too (unknown fields ignored).
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from ._wire import WireModel

__all__ = [
    "BenchmarkJobList",
    "BenchmarkJobView",
    "BenchmarkList",
    "BenchmarkOptions",
    "BenchmarkResult",
    "BenchmarkSizes",
    "ColdPromptResult",
    "ConcurrencyLevelResult",
    "EmbeddingLevel",
    "EmbeddingsResult",
    "JobState",
    "PrefillResult",
    "PresetSizes",
    "PresetWorkloads",
    "QuestionAnswer",
    "QuestionsResult",
    "RunMeasurement",
    "SharedPrefixResult",
    "ShortChatLevel",
    "SloGuards",
    "ToolCallResult",
]

JobState = Literal["running", "succeeded", "failed", "cancelled"]
"""Where a job is: running, or how it ended."""


class BenchmarkSizes(WireModel):
    """The sizes a suite ran with (the spec's by default; tests on tiny models pass smaller ones).

    Attributes:
        levels: the concurrency levels N, in order.
        runs: the runs at each level (medians are taken over them).
        max_tokens: the tokens each streamed chat asks for (``max_tokens`` = ``min_tokens``).
        prefill_tokens: the cap of the prefill prompt (the model's max length caps it too).
        question_tokens: the tokens an objective question may answer with.
    """

    levels: list[int] = Field(default_factory=lambda: [1, 4, 8, 16])
    runs: int = Field(default=3, ge=1)
    max_tokens: int = Field(default=256, ge=1)
    prefill_tokens: int = Field(default=65_536, ge=1)
    question_tokens: int = Field(default=32, ge=1)


class PresetSizes(WireModel):
    """The sizes of a workload preset run (the spec's by default; tests on tiny models pass smaller ones).

    Attributes:
        levels: the fixed concurrency levels of the short chat; the configuration's max num seqs (capped
            at ``max_seqs_cap``) is added when it differs.
        max_seqs_cap: the most the max-num-seqs level may be.
        repetitions: how often each workload is measured (medians are taken over them).
        short_output_tokens: the output lengths of the short chat (``max_tokens`` = ``min_tokens``).
        cold_prompt_tokens: the cold long prompts (each only when it fits the max model len).
        shared_prefix_tokens: the size of the shared-prefix workload's system prompt.
        shared_prefix_questions: the timed questions per repetition over that system prompt.
        question_tokens: the tokens an objective question may answer with.
        tool_call_tokens: the tokens a tool-call case may answer with.
        embedding_levels: the fixed concurrency levels of the embeddings suite (max num seqs is added).
        embedding_input_words: the words of the 4 inputs of an embeddings batch (mixed lengths).
    """

    levels: list[int] = Field(default_factory=lambda: [1, 16])
    max_seqs_cap: int = Field(default=64, ge=1)
    repetitions: int = Field(default=3, ge=1)
    short_output_tokens: list[int] = Field(default_factory=lambda: [256, 1024])
    cold_prompt_tokens: list[int] = Field(default_factory=lambda: [16_384, 65_536])
    shared_prefix_tokens: int = Field(default=8_192, ge=1)
    shared_prefix_questions: int = Field(default=4, ge=1)
    question_tokens: int = Field(default=32, ge=1)
    tool_call_tokens: int = Field(default=256, ge=1)
    embedding_levels: list[int] = Field(default_factory=lambda: [1, 16])
    embedding_input_words: list[int] = Field(
        default_factory=lambda: [8, 32, 96, 256], min_length=4, max_length=4
    )


class SloGuards(WireModel):
    """A workload preset's guards: what a measurement must keep to count (None / False: guard off).

    Each preset has its defaults; a job may override any of them (absent fields keep the preset's).

    Attributes:
        short_ttft_p95_n1_s: the most the short chat's TTFT p95 at N=1 may be.
        short_ttft_p95_n16_s: the most the short chat's TTFT p95 at N=16 may be.
        long_ttft_vs_baseline: the most a cold long prompt's TTFT may be as a multiple of the baseline's.
        max_error_rate: the largest share of failed requests (0: none may fail).
        objective_at_least_baseline: the objective questions must score at least the baseline's.
        tool_validity: every tool call must validate against its tool's schema.
        valid_vectors: every embedding must be one finite, non-zero vector per input of one dimension.
        unchanged_normalization: embeddings must be unit length exactly when the baseline's were.
        embedding_latency_p95_n16_vs_baseline: the most the embeddings latency p95 at N=16 may be as a
            multiple of the baseline's.
    """

    short_ttft_p95_n1_s: float | None = Field(default=None, gt=0)
    short_ttft_p95_n16_s: float | None = Field(default=None, gt=0)
    long_ttft_vs_baseline: float | None = Field(default=None, gt=0)
    max_error_rate: float | None = Field(default=None, ge=0, le=1)
    objective_at_least_baseline: bool = False
    tool_validity: bool = False
    valid_vectors: bool = False
    unchanged_normalization: bool = False
    embedding_latency_p95_n16_vs_baseline: float | None = Field(default=None, gt=0)


class BenchmarkOptions(WireModel):
    """The optional body of ``POST /api/models/{id}/benchmark``.

    Attributes:
        guards: overrides of the preset's guards for this job (only the fields given count).
    """

    guards: SloGuards | None = None


class RunMeasurement(WireModel):
    """One run of N concurrent streamed chats.

    Attributes:
        per_request_tokens_per_s: the median over the requests of tokens ÷ (total - TTFT).
        aggregate_tokens_per_s: every request's tokens ÷ the run's wall time.
        ttft_p50_s: the median time to first token (nearest rank).
        ttft_p95_s: the 95th percentile time to first token (nearest rank).
        tokens: the completion tokens of the run.
        wall_s: from the first request sent to the last answer read.
        failed: the requests that failed.
        noisy: why the run's numbers may be disturbed (other models busy ...).
    """

    per_request_tokens_per_s: float
    aggregate_tokens_per_s: float
    ttft_p50_s: float
    ttft_p95_s: float
    tokens: int
    wall_s: float
    failed: int = 0
    noisy: list[str] = Field(default_factory=list)


class ConcurrencyLevelResult(WireModel):
    """One concurrency level: its runs and the per-metric medians over them.

    Attributes:
        concurrency: N, the requests in flight at once.
        per_request_tokens_per_s: median over the runs.
        aggregate_tokens_per_s: median over the runs.
        ttft_p50_s: median over the runs.
        ttft_p95_s: median over the runs.
        runs: each run's measurement.
    """

    concurrency: int
    per_request_tokens_per_s: float
    aggregate_tokens_per_s: float
    ttft_p50_s: float
    ttft_p95_s: float
    runs: list[RunMeasurement] = Field(default_factory=list)


class PrefillResult(WireModel):
    """A long prompt with a unique prefix, then the same prompt again (a prefix-cache hit).

    Attributes:
        prompt_tokens: the prompt's tokens as the model counted them.
        cold_ttft_s: time to first token of the first send.
        warm_ttft_s: time to first token of the second send.
        cached_tokens: the prompt tokens the model says it reused on the second send, when it says.
        cache_source: where ``cached_tokens`` came from (the response field read), or why it is unknown.
    """

    prompt_tokens: int
    cold_ttft_s: float
    warm_ttft_s: float
    cached_tokens: int | None = None
    cache_source: str = ""


class ToolCallResult(WireModel):
    """The tool call with a schema without properties.

    Attributes:
        called: whether the model answered with a tool call.
        valid: whether its arguments validate against the tool's JSON schema.
        detail: what went wrong, for people.
    """

    called: bool
    valid: bool
    detail: str = ""


class QuestionAnswer(WireModel):
    """One objective question and how it was answered."""

    question: str
    answer: str
    correct: bool


class QuestionsResult(WireModel):
    """The objective questions, scored by regex."""

    correct: int
    asked: int
    answers: list[QuestionAnswer] = Field(default_factory=list)


class ShortChatLevel(WireModel):
    """One level N of a preset's short chat at one output length, over its repetitions.

    The speeds and latencies are medians over the repetitions that had a request succeed; None when
    every request of the level failed (the failures are counted, the run goes on).

    Attributes:
        output_tokens: the output length of every request.
        concurrency: N.
        requests: the requests sent over the repetitions.
        failed: those of them that failed.
        per_request_tokens_per_s: the median per-request decode speed.
        aggregate_tokens_per_s: the median aggregate speed.
        ttft_p50_s: the median TTFT p50.
        ttft_p95_s: the median TTFT p95.
        runs: each repetition that had a request succeed.
    """

    output_tokens: int
    concurrency: int
    requests: int = 0
    failed: int = 0
    per_request_tokens_per_s: float | None = None
    aggregate_tokens_per_s: float | None = None
    ttft_p50_s: float | None = None
    ttft_p95_s: float | None = None
    runs: list[RunMeasurement] = Field(default_factory=list)


class ColdPromptResult(WireModel):
    """A cold long prompt: a fresh random 24-word head before the reusable content, every repetition.

    Attributes:
        tokens: the prompt's size.
        ttft_s: the median TTFT over the repetitions; None when it was skipped.
        prompt_tokens: the prompt tokens the server counted.
        skipped: why it was not sent (it does not fit the max model len ...); empty when it was.
    """

    tokens: int
    ttft_s: float | None = None
    prompt_tokens: int = 0
    skipped: str = ""


class SharedPrefixResult(WireModel):
    """Questions over one shared system prompt, primed once untimed.

    Attributes:
        ttft_s: the median TTFT of the timed questions.
        questions: the timed questions.
        cache_hits: the delta of the model's own prefix-cache-hit counter over the timed questions;
            None when the counter could not be read.
        cache_source: where the counter was read.
        note: ``"repeated prompt (no cache reuse observed)"`` at 0 hits, ``"(cache metrics
            unavailable)"`` when there is no counter, else empty.
    """

    ttft_s: float
    questions: int
    cache_hits: float | None = None
    cache_source: str = ""
    note: str = ""


class EmbeddingLevel(WireModel):
    """One level N of the embeddings suite over its repetitions (medians; None when all failed).

    Attributes:
        concurrency: N requests at once, each a batch of 4 inputs.
        requests: the requests sent over the repetitions.
        failed: those of them that failed.
        input_tokens_per_s: the median of usage.prompt_tokens ÷ wall.
        requests_per_s: the median of requests ÷ wall.
        latency_p50_s: the median latency p50 (nearest rank).
        latency_p95_s: the median latency p95 (nearest rank).
    """

    concurrency: int
    requests: int = 0
    failed: int = 0
    input_tokens_per_s: float | None = None
    requests_per_s: float | None = None
    latency_p50_s: float | None = None
    latency_p95_s: float | None = None


class EmbeddingsResult(WireModel):
    """The embeddings suite: its levels and the shape check of every answer.

    Attributes:
        levels: the levels, in order.
        vectors_valid: every answer held one finite, non-zero vector per input, all of one dimension.
        shape_detail: what was wrong, when something was.
        dimension: the vectors' dimension.
        unit_length: whether every vector was unit length (normalized).
        input_note: how the inputs were shortened to fit the model's input limit, when they were.
    """

    levels: list[EmbeddingLevel] = Field(default_factory=list)
    vectors_valid: bool = True
    shape_detail: str = ""
    dimension: int | None = None
    unit_length: bool | None = None
    input_note: str = ""


class PresetWorkloads(WireModel):
    """What a preset run measured, by workload (a workload the preset did not pick stays empty).

    Attributes:
        short_chat: the short chat's levels, by output length then N.
        tool_calls: every tool call of every repetition.
        cold_prompts: the cold long prompts.
        shared_prefix: the shared-prefix workload.
        embeddings: the embeddings suite.
        levels_note: how the levels were picked (max num seqs unknown ...).
    """

    short_chat: list[ShortChatLevel] = Field(default_factory=list)
    tool_calls: list[ToolCallResult] = Field(default_factory=list)
    cold_prompts: list[ColdPromptResult] = Field(default_factory=list)
    shared_prefix: SharedPrefixResult | None = None
    embeddings: EmbeddingsResult | None = None
    levels_note: str = ""


class BenchmarkResult(WireModel):
    """One benchmark of one model with its settings at the time (a results file).

    Attributes:
        schema_version: 1 for the classic suite (absent in a file means 1).
        preset: the preset run; None for the classic suite.
        model_id: the model.
        served_name: its served name.
        node_id: the node it ran on.
        runtime: its runtime (``vllm``, ``llamacpp`` ...).
        started_at: when the job started.
        finished_at: when the suite finished.
        config_hash: the running instance's config hash, as its node reports it.
        restart_pending: whether the instance ran other settings than the saved ones.
        settings: the arguments the instance ran with, read back from it (a container's command, a native
            process's command line); the ones built from its definition where its node could not tell.
        sizes: the sizes the suite ran with.
        gpu: the GPU check: ``"idle"``, ``"busy"`` or why it was skipped.
        noisy: why the numbers may be disturbed, for the whole run.
        levels: the concurrency levels.
        prefill: the long-prompt measurement.
        tool_call: the tool call.
        questions: the objective questions.
        repetitions: a preset run's repetitions (schema 2).
        preset_sizes: the sizes a preset run ran with (schema 2).
        workloads: what a preset run measured by workload (schema 2).
        components: a preset run's score components by key (schema 2), for scoring against a baseline.
        guards: the guards a preset run was held to (schema 2).
        guard_violations: the absolute guards it broke, in words (the relative ones need a baseline).
    """

    schema_version: int = 1
    preset: str | None = None
    model_id: str
    served_name: str
    node_id: str
    runtime: str
    started_at: datetime
    finished_at: datetime
    config_hash: str | None = None
    restart_pending: bool = False
    settings: list[str] = Field(default_factory=list)
    sizes: BenchmarkSizes = Field(default_factory=BenchmarkSizes)
    gpu: str = ""
    noisy: list[str] = Field(default_factory=list)
    levels: list[ConcurrencyLevelResult] = Field(default_factory=list)
    prefill: PrefillResult | None = None
    tool_call: ToolCallResult | None = None
    questions: QuestionsResult | None = None
    repetitions: int | None = None
    preset_sizes: PresetSizes | None = None
    workloads: PresetWorkloads | None = None
    components: dict[str, float] = Field(default_factory=dict)
    guards: SloGuards | None = None
    guard_violations: list[str] = Field(default_factory=list)


class BenchmarkList(WireModel):
    """A model's stored benchmarks, newest first, and the files that could not be read."""

    results: list[BenchmarkResult] = Field(default_factory=list)
    skipped: list[str] = Field(default_factory=list)


class BenchmarkJobView(WireModel):
    """A benchmark job and its live progress.

    Attributes:
        id: the job's id.
        model_id: the model benchmarked.
        node_id: the node it holds in maintenance.
        preset: the preset; None for the classic suite.
        state: running, or how it ended.
        phase: what it is doing (``draining``, ``warm-up``, ``concurrency``, ``prefill`` ...).
        concurrency: the level N being measured, in the ``concurrency`` phase.
        run: the run at that level (1-based).
        runs: the runs per level.
        eta_s: the seconds it expects to still need.
        started_at: when it started.
        finished_at: when it ended.
        error: why it failed.
        result: the results file's name once written.
    """

    id: str
    model_id: str
    node_id: str
    preset: str | None = None
    state: JobState = "running"
    phase: str = "queued"
    concurrency: int | None = None
    run: int | None = None
    runs: int | None = None
    eta_s: float | None = None
    started_at: datetime
    finished_at: datetime | None = None
    error: str | None = None
    result: str | None = None


class BenchmarkJobList(WireModel):
    """Every node's current or last benchmark job."""

    jobs: list[BenchmarkJobView] = Field(default_factory=list)
