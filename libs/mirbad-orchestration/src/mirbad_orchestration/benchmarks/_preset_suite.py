"""The preset suite (schema v2): the workloads a workload preset picks, measured for its score.

After an untimed warm-up it runs, in this order, the workloads of the preset (:mod:`._presets`):

* short chat: each output length by N = the fixed levels and the configuration's max num seqs (capped),
  over code, tool-style and prose prompts with a distinct suffix per request (no two requests share a
  whole prompt); a failed request is counted in its level, never fails the run;
* tool calls: the three cases of :data:`PRESET_TOOL_CASES` in every repetition, validated with
  ``jsonschema``;
* cold prompts: each size that fits the max model len, an untimed warm-up, then per repetition a fresh
  random 24-word sequence before the reusable content, so only the content could ever be cached;
* shared prefix: one system prompt per run, primed once untimed, then timed questions over it; the
  delta of the model's own prefix-cache-hit counter over those questions says whether it was reused;
* the eight objective questions.

The sizes are parameters (:class:`~mirbad_protocol.benchmarks.PresetSizes`); the product runs the spec's.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from mirbad_orchestration.exceptions import BenchmarkRequestError
from mirbad_protocol.benchmarks import (
    ColdPromptResult,
    PresetSizes,
    PresetWorkloads,
    QuestionAnswer,
    QuestionsResult,
    RunMeasurement,
    SharedPrefixResult,
    ShortChatLevel,
    ToolCallResult,
)

from ._checks import OBJECTIVE_QUESTIONS
from ._embeddings import EmbeddingsSuite, InputLimit
from ._load import ChatEndpoint, StreamedChat, measure_run, post_chat, stream_chat
from ._presets import WorkloadPreset
from ._score import GuardInputs
from ._stats import median
from ._suite import NoiseCheck, Progress
from ._tools import PRESET_TOOL_CASES, check_tool_call

__all__ = ["PROMPT_SETS", "CacheCounter", "PresetOutcome", "PresetSuite", "preset_levels"]

PROMPT_SETS: Final = (
    (
        "Write a Python function that parses an ISO 8601 date and explain the edge cases.",
        "Review this idea for a cache with a time to live and name the bugs it would have.",
    ),
    (
        "You are an agent. Plan the steps to rename a column in a production database safely.",
        "As a tool-using assistant, list the API calls needed to resize a cloud volume.",
    ),
    (
        "Write a short essay about the history of lighthouses and the people who kept them.",
        "Describe a walk through a city market in the early morning, in vivid prose.",
    ),
)
"""The short chat's prompt sets: code, tool-style and prose; request i asks set i mod 3."""

CacheCounter = Callable[[], Awaitable[float | None]]
"""Reads the model's own prefix-cache-hit counter; None when its metrics cannot be read."""

_WORDS: Final = (
    "amber", "basil", "cobalt", "delta", "ember", "fjord", "granite", "harbor", "indigo", "juniper",
    "kestrel", "lagoon", "meadow", "nectar", "orchid", "pepper", "quartz", "raven", "saffron", "tundra",
    "umber", "velvet", "willow", "yarrow", "zephyr", "acorn", "birch", "cedar", "dune", "elm",
)  # fmt: skip
_FILLER: Final = ("the", "of", "and", "to", "in", "is", "it", "on", "for", "with", "we", "you")
_HEAD_WORDS: Final = 24
# Tokens left for the chat template, the random head and the answer around a long prompt.
_MARGIN: Final = 96
_SMALL_CONTEXT: Final = 1024  # a context this small gets a short head: still never cached before
_SMALL_HEAD_WORDS: Final = 4
_THINKING_OFF: Final = {"chat_template_kwargs": {"enable_thinking": False}}
_NO_REUSE: Final = "repeated prompt (no cache reuse observed)"
_UNAVAILABLE: Final = "(cache metrics unavailable)"
_SHARED_QUESTIONS: Final = (
    "In one sentence, what is the document above about?",
    "Name one word that appears often in the document above.",
    "Is the document above long or short? Answer in one word.",
    "Give the document above a title of three words.",
)


async def _quiet() -> list[str]:
    return []


async def _no_counter() -> float | None:
    return None


def preset_levels(sizes: PresetSizes, max_num_seqs: int | None) -> tuple[list[int], int | None, str]:
    """The short chat's levels, the max-num-seqs level among them (None: unknown) and a note.

    The levels are the fixed ones, then max num seqs (at most the cap) when it is not one of them.
    """
    levels = list(dict.fromkeys(sizes.levels))
    if max_num_seqs is None:
        return levels, None, "max num seqs unknown: only the fixed levels ran"
    top = min(max_num_seqs, sizes.max_seqs_cap)
    if top not in levels:
        levels.append(top)
    return levels, top, ""


@dataclass(frozen=True)
class PresetOutcome:
    """What a preset run measured, its score components and what its guards read."""

    workloads: PresetWorkloads
    questions: QuestionsResult | None
    components: dict[str, float]
    guard_inputs: GuardInputs


class PresetSuite:
    """The workloads of one preset over one endpoint (see the module).

    Args:
        endpoint: where the model answers.
        preset: the preset (a generation one; the embeddings preset has its own suite).
        sizes: the sizes.
        max_model_len: the model's context length (long prompts that do not fit are skipped).
        max_num_seqs: the configuration's max num seqs, the top level of the short chat.
        cache_counter: reads the model's prefix-cache-hit counter (none: read llama-server's
            per-request ``timings.cache_n``, else unavailable).
        progress: told each phase.
        noise: asked after every timed short-chat run.
        input_limit: the longest input the instance embeds (the embeddings preset fits its inputs to it).
    """

    def __init__(
        self,
        endpoint: ChatEndpoint,
        preset: WorkloadPreset,
        sizes: PresetSizes,
        *,
        max_model_len: int | None,
        max_num_seqs: int | None,
        cache_counter: CacheCounter = _no_counter,
        progress: Progress | None = None,
        noise: NoiseCheck = _quiet,
        input_limit: InputLimit | None = None,
    ) -> None:
        self._input_limit = input_limit
        self._endpoint = endpoint
        self._preset = preset
        self._sizes = sizes
        self._max_model_len = max_model_len
        self._max_num_seqs = max_num_seqs
        self._cache_counter = cache_counter
        self._progress = progress or Progress()
        self._noise = noise

    async def run(self) -> PresetOutcome:
        """Run the preset's workloads in order.

        Raises:
            BenchmarkRequestError: the warm-up failed (the model does not answer at all).
        """
        workloads = set(self._preset.workloads)
        if "embeddings" in workloads:
            return await self._embeddings()
        await self._progress.phase("warm-up")
        await stream_chat(self._endpoint, self._short_body(0, self._sizes.short_output_tokens[0]))
        levels, top, note = preset_levels(self._sizes, self._max_num_seqs)
        short: list[ShortChatLevel] = []
        if "short-chat" in workloads:
            for tokens in self._sizes.short_output_tokens:
                for n in levels:
                    short.append(await self._short_level(tokens, n))
        tools = await self._tool_calls() if "tool-calls" in workloads else []
        cold = await self._cold_prompts() if "cold-prompts" in workloads else []
        shared = await self._shared_prefix() if "shared-prefix" in workloads else None
        questions = await self._questions() if "questions" in workloads else None
        measured = PresetWorkloads(
            short_chat=short, tool_calls=tools, cold_prompts=cold, shared_prefix=shared, levels_note=note
        )
        return PresetOutcome(
            measured,
            questions,
            # Only the preset's own components: they are what a baseline of this preset is scored on.
            {k: v for k, v in _components(measured, top).items() if k in self._preset.weights},
            _guard_inputs(measured, questions),
        )

    async def _embeddings(self) -> PresetOutcome:
        suite = EmbeddingsSuite(
            self._endpoint,
            self._sizes,
            max_num_seqs=self._max_num_seqs,
            progress=self._progress,
            input_limit=self._input_limit,
        )
        result = await suite.run()
        by_n = {level.concurrency: level for level in result.levels}
        found = {
            "embed_n1_input_tok_s": by_n[1].input_tokens_per_s if 1 in by_n else None,
            "embed_n16_input_tok_s": by_n[16].input_tokens_per_s if 16 in by_n else None,
        }
        guard_inputs = GuardInputs(
            requests=sum(level.requests for level in result.levels),
            failed=sum(level.failed for level in result.levels),
            vectors_valid=result.vectors_valid,
            unit_length=result.unit_length,
            embedding_latency_p95_n16_s=by_n[16].latency_p95_s if 16 in by_n else None,
        )
        return PresetOutcome(
            PresetWorkloads(embeddings=result),
            None,
            {key: value for key, value in found.items() if value is not None},
            guard_inputs,
        )

    def _short_body(self, index: int, tokens: int) -> dict[str, Any]:
        prompts = PROMPT_SETS[index % len(PROMPT_SETS)]
        prompt = prompts[(index // len(PROMPT_SETS)) % len(prompts)]
        return {
            # The distinct suffix keeps two requests of a run from being one cached prompt.
            "messages": [{"role": "user", "content": f"{prompt} (request {secrets.token_hex(4)})"}],
            "max_tokens": tokens,
            "min_tokens": tokens,
            "temperature": 0,
            **_THINKING_OFF,
        }

    async def _short_level(self, tokens: int, concurrency: int) -> ShortChatLevel:
        runs: list[RunMeasurement] = []
        failed = 0
        for run in range(1, self._sizes.repetitions + 1):
            await self._progress.phase("short-chat", concurrency=concurrency, run=run)
            bodies = [self._short_body(i, tokens) for i in range(concurrency)]
            try:
                measured, _ = await measure_run(self._endpoint, bodies)
            except BenchmarkRequestError:
                failed += concurrency  # every request of this repetition failed: counted, not fatal
                continue
            failed += measured.failed
            noisy = await self._noise()
            runs.append(measured.model_copy(update={"noisy": noisy}) if noisy else measured)
        level = ShortChatLevel(
            output_tokens=tokens,
            concurrency=concurrency,
            requests=concurrency * self._sizes.repetitions,
            failed=failed,
            runs=runs,
        )
        if not runs:
            return level
        return level.model_copy(
            update={
                "per_request_tokens_per_s": median([r.per_request_tokens_per_s for r in runs]),
                "aggregate_tokens_per_s": median([r.aggregate_tokens_per_s for r in runs]),
                "ttft_p50_s": median([r.ttft_p50_s for r in runs]),
                "ttft_p95_s": median([r.ttft_p95_s for r in runs]),
            }
        )

    async def _tool_calls(self) -> list[ToolCallResult]:
        results = []
        for run in range(1, self._sizes.repetitions + 1):
            await self._progress.phase("tool-calls", run=run)
            for case in PRESET_TOOL_CASES:
                try:
                    response = await post_chat(
                        self._endpoint, case.request(max_tokens=self._sizes.tool_call_tokens) | _THINKING_OFF
                    )
                except BenchmarkRequestError as exc:
                    results.append(ToolCallResult(called=False, valid=False, detail=str(exc)))
                    continue
                results.append(check_tool_call(case, response))
        return results

    def _fits(self, tokens: int) -> bool:
        return self._max_model_len is not None and tokens + _MARGIN <= self._max_model_len

    async def _cold_prompts(self) -> list[ColdPromptResult]:
        results = []
        for tokens in self._sizes.cold_prompt_tokens:
            if not self._fits(tokens):
                known = (
                    f"the max model len {self._max_model_len}"
                    if self._max_model_len
                    else "an unknown max model len"
                )
                results.append(ColdPromptResult(tokens=tokens, skipped=f"does not fit {known}"))
                continue
            await self._progress.phase("cold-prompts", concurrency=tokens)
            content = _filler(tokens - _HEAD_WORDS)
            await stream_chat(self._endpoint, _prompt_body(f"{_random_head()} {content}"))  # untimed
            chats: list[StreamedChat] = []
            for run in range(1, self._sizes.repetitions + 1):
                await self._progress.phase("cold-prompts", concurrency=tokens, run=run)
                chats.append(await stream_chat(self._endpoint, _prompt_body(f"{_random_head()} {content}")))
            results.append(
                ColdPromptResult(
                    tokens=tokens,
                    ttft_s=median([chat.ttft_s for chat in chats]),
                    prompt_tokens=_prompt_tokens(chats[-1]),
                )
            )
        return results

    async def _shared_prefix(self) -> SharedPrefixResult:
        await self._progress.phase("shared-prefix")
        size = self._sizes.shared_prefix_tokens
        if self._max_model_len is not None:
            size = max(1, min(size, self._max_model_len - 2 * _MARGIN))
        # A fresh head per run: this run's system prompt was never cached by an earlier one.
        # The head counts against the context too: in a small one (a tiny test model whose vocabulary spells
        # the head words out letter by letter) a full head alone could fill it.
        small = self._max_model_len is not None and self._max_model_len <= _SMALL_CONTEXT
        system = f"{_random_head(_SMALL_HEAD_WORDS if small else _HEAD_WORDS)} {_filler(size)}"
        await stream_chat(self._endpoint, _shared_body(system, _SHARED_QUESTIONS[0]))  # primes the cache
        before = await self._cache_counter()
        chats: list[StreamedChat] = []
        for run in range(1, self._sizes.repetitions + 1):
            await self._progress.phase("shared-prefix", run=run)
            for i in range(self._sizes.shared_prefix_questions):
                question = _SHARED_QUESTIONS[i % len(_SHARED_QUESTIONS)]
                chats.append(await stream_chat(self._endpoint, _shared_body(system, question)))
        after = await self._cache_counter()
        hits, source = _cache_delta(before, after, chats)
        note = _UNAVAILABLE if hits is None else _NO_REUSE if hits == 0 else ""
        return SharedPrefixResult(
            ttft_s=median([chat.ttft_s for chat in chats]),
            questions=len(chats),
            cache_hits=hits,
            cache_source=source,
            note=note,
        )

    async def _questions(self) -> QuestionsResult:
        await self._progress.phase("questions")
        answers = []
        for question in OBJECTIVE_QUESTIONS:
            body = {
                "messages": [{"role": "user", "content": question.question}],
                "max_tokens": self._sizes.question_tokens,
                "temperature": 0,
                **_THINKING_OFF,
            }
            try:
                reply = _reply_text(await post_chat(self._endpoint, body))
            except BenchmarkRequestError:
                reply = ""  # a failed answer is a wrong one; the short chat counts the failures
            answers.append(
                QuestionAnswer(
                    question=question.question, answer=reply, correct=question.is_answered_by(reply)
                )
            )
        return QuestionsResult(correct=sum(a.correct for a in answers), asked=len(answers), answers=answers)


def _random_head(words: int = _HEAD_WORDS) -> str:
    return " ".join(secrets.choice(_WORDS) for _ in range(words))


def _filler(words: int) -> str:
    # Common words that tokenizers keep whole, so words ≈ tokens.
    return " ".join(_FILLER[i % len(_FILLER)] for i in range(max(1, words)))


def _prompt_body(content: str) -> dict[str, Any]:
    return {
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 1,
        "temperature": 0,
        **_THINKING_OFF,
    }


def _shared_body(system: str, question: str) -> dict[str, Any]:
    return {
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
        "max_tokens": 8,
        "temperature": 0,
        **_THINKING_OFF,
    }


def _cache_delta(
    before: float | None, after: float | None, chats: list[StreamedChat]
) -> tuple[float | None, str]:
    """The counter's delta; llama-server has no such counter, so its per-request ``cache_n`` is summed."""
    if before is not None and after is not None:
        return max(0.0, after - before), "vllm:prefix_cache_hits"
    reused = [chat.timings.get("cache_n") for chat in chats if chat.timings is not None]
    if chats and len(reused) == len(chats) and all(isinstance(n, int) for n in reused):
        return float(sum(n for n in reused if isinstance(n, int))), "timings.cache_n (llama-server)"
    return None, ""


def _prompt_tokens(chat: StreamedChat) -> int:
    counted = chat.usage.get("prompt_tokens") if chat.usage else None
    return counted if isinstance(counted, int) else 0


def _reply_text(response: Mapping[str, Any]) -> str:
    choices = response.get("choices") or [{}]
    content = (choices[0].get("message") or {}).get("content")
    return content if isinstance(content, str) else ""


def _level(measured: PresetWorkloads, n: int) -> ShortChatLevel | None:
    # The components read the shortest output length: the one every preset's latency guards mean.
    shortest = min((level.output_tokens for level in measured.short_chat), default=None)
    return next(
        (lvl for lvl in measured.short_chat if lvl.output_tokens == shortest and lvl.concurrency == n), None
    )


def _components(measured: PresetWorkloads, top: int | None) -> dict[str, float]:
    """The score components a run measured (a component it could not measure is absent)."""
    found: dict[str, float | None] = {}
    one, sixteen = _level(measured, 1), _level(measured, 16)
    found["short_n1_tok_s"] = one.per_request_tokens_per_s if one else None
    found["short_n16_tok_s"] = sixteen.aggregate_tokens_per_s if sixteen else None
    at_top = _level(measured, top) if top is not None else None
    found["short_max_seqs_tok_s"] = at_top.aggregate_tokens_per_s if at_top else None
    for cold in measured.cold_prompts:
        key = {16_384: "cold_16k_ttft_s", 65_536: "cold_64k_ttft_s"}.get(cold.tokens)
        if key is not None:
            found[key] = cold.ttft_s
    if measured.shared_prefix is not None:
        found["shared_prefix_ttft_s"] = measured.shared_prefix.ttft_s
    return {key: value for key, value in found.items() if value is not None}


def _guard_inputs(measured: PresetWorkloads, questions: QuestionsResult | None) -> GuardInputs:
    one, sixteen = _level(measured, 1), _level(measured, 16)
    return GuardInputs(
        short_ttft_p95_n1_s=one.ttft_p95_s if one else None,
        short_ttft_p95_n16_s=sixteen.ttft_p95_s if sixteen else None,
        long_ttft_s={cold.tokens: cold.ttft_s for cold in measured.cold_prompts if cold.ttft_s is not None},
        requests=sum(level.requests for level in measured.short_chat),
        failed=sum(level.failed for level in measured.short_chat),
        objective_correct=questions.correct if questions else None,
        tool_calls=len(measured.tool_calls),
        tool_calls_valid=sum(call.valid for call in measured.tool_calls),
    )
