"""The classic suite: concurrency levels, a long prefill twice, a tool call and objective questions.

Every chat is streamed with fixed prompts, ``max_tokens`` = ``min_tokens`` (so every request decodes the
same length), temperature 0 and thinking off. After an untimed warm-up, each level N runs ``runs``
times and its result is the per-metric median over the runs. The prefill prompt has a unique prefix
(no earlier request can have cached it) and is sent twice: the second send is the prefix-cache hit.
The sizes are parameters (:class:`~mirbad_protocol.benchmarks.BenchmarkSizes`); the product runs the spec's.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from mirbad_orchestration.exceptions import BenchmarkRequestError
from mirbad_protocol.benchmarks import (
    BenchmarkSizes,
    ConcurrencyLevelResult,
    PrefillResult,
    QuestionAnswer,
    QuestionsResult,
    RunMeasurement,
    ToolCallResult,
)

from ._checks import OBJECTIVE_QUESTIONS, TOOL_CALL_REQUEST, score_tool_call
from ._load import ChatEndpoint, StreamedChat, measure_run, post_chat, stream_chat
from ._stats import median

__all__ = ["CLASSIC_PROMPTS", "ClassicSuite", "NoiseCheck", "Progress", "SuiteOutcome"]

CLASSIC_PROMPTS: Final = (
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain how a hash table works and when its lookups stop being constant time.",
    "Describe the water cycle to a ten-year-old, step by step.",
    "Write a Python function that merges two sorted lists, and explain it.",
    "List the pros and cons of working from home, with a sentence on each.",
    "Summarize the plot of a heist film you invent, scene by scene.",
    "Explain the difference between TCP and UDP with examples of when to use each.",
    "Write a letter to a neighbour asking them to water your plants for a week.",
)
"""The fixed prompts; request i of a run asks prompt i modulo their count."""

# Filler for the prefill prompt: common words that tokenizers keep whole, so words ≈ tokens.
_FILLER: Final = ("the", "of", "and", "to", "in", "is", "it", "on", "for", "with", "we", "you")
# Tokens left for the chat template and the answer around the prefill words.
_PREFILL_MARGIN: Final = 64
_THINKING_OFF: Final = {"chat_template_kwargs": {"enable_thinking": False}}


class Progress:
    """What the suite reports as it goes (the job shows it); the base class ignores it all."""

    async def phase(self, name: str, *, concurrency: int | None = None, run: int | None = None) -> None:
        """The suite entered ``name`` (warm-up, concurrency, prefill, tool-call, questions)."""


NoiseCheck = Callable[[], Awaitable[list[str]]]
"""Returns why the last run may be disturbed (other models busy ...), empty when it was quiet."""


@dataclass(frozen=True)
class SuiteOutcome:
    """What the classic suite measured."""

    levels: list[ConcurrencyLevelResult]
    prefill: PrefillResult | None
    tool_call: ToolCallResult
    questions: QuestionsResult


async def _quiet() -> list[str]:
    return []


class ClassicSuite:
    """The classic suite over one endpoint (see the module).

    Args:
        endpoint: where the model answers.
        sizes: the levels, runs and token counts.
        max_model_len: the model's context length, which caps the prefill prompt.
        progress: told each phase.
        noise: asked after every timed run.
    """

    def __init__(
        self,
        endpoint: ChatEndpoint,
        sizes: BenchmarkSizes,
        *,
        max_model_len: int | None,
        progress: Progress | None = None,
        noise: NoiseCheck = _quiet,
    ) -> None:
        self._endpoint = endpoint
        self._sizes = sizes
        self._max_model_len = max_model_len
        self._progress = progress or Progress()
        self._noise = noise

    async def run(self) -> SuiteOutcome:
        """Run every part in order.

        Raises:
            BenchmarkRequestError: a timed run failed in every request, or the warm-up failed.
        """
        await self._progress.phase("warm-up")
        await stream_chat(self._endpoint, self._chat_body(0))
        levels = [await self._level(n) for n in self._sizes.levels]
        await self._progress.phase("prefill")
        prefill = await self._prefill()
        await self._progress.phase("tool-call")
        tool_call = await self._tool_call()
        await self._progress.phase("questions")
        questions = await self._questions()
        return SuiteOutcome(levels, prefill, tool_call, questions)

    def _chat_body(self, index: int) -> dict[str, Any]:
        prompt = CLASSIC_PROMPTS[index % len(CLASSIC_PROMPTS)]
        tokens = self._sizes.max_tokens
        return {
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": tokens,
            "min_tokens": tokens,
            "temperature": 0,
            **_THINKING_OFF,
        }

    async def _level(self, concurrency: int) -> ConcurrencyLevelResult:
        runs: list[RunMeasurement] = []
        for run in range(1, self._sizes.runs + 1):
            await self._progress.phase("concurrency", concurrency=concurrency, run=run)
            bodies = [self._chat_body(i) for i in range(concurrency)]
            measured, _ = await measure_run(self._endpoint, bodies)
            noisy = await self._noise()
            runs.append(measured.model_copy(update={"noisy": noisy}) if noisy else measured)
        return ConcurrencyLevelResult(
            concurrency=concurrency,
            per_request_tokens_per_s=median([r.per_request_tokens_per_s for r in runs]),
            aggregate_tokens_per_s=median([r.aggregate_tokens_per_s for r in runs]),
            ttft_p50_s=median([r.ttft_p50_s for r in runs]),
            ttft_p95_s=median([r.ttft_p95_s for r in runs]),
            runs=runs,
        )

    def prefill_words(self) -> int:
        """The words of the prefill prompt: min(max model len, the size) less room for template and answer."""
        cap = self._sizes.prefill_tokens
        limit = min(cap, self._max_model_len) if self._max_model_len is not None else cap
        return max(1, limit - _PREFILL_MARGIN)

    async def _prefill(self) -> PrefillResult:
        # A fresh random prefix: nothing sent before can share the prompt's first tokens.
        words = self.prefill_words()
        filler = " ".join(_FILLER[i % len(_FILLER)] for i in range(words))
        body = {
            "messages": [{"role": "user", "content": f"{secrets.token_hex(8)} {filler}"}],
            "max_tokens": 1,
            "temperature": 0,
            **_THINKING_OFF,
        }
        cold = await stream_chat(self._endpoint, body)
        warm = await stream_chat(self._endpoint, body)
        cached, source = _cached_tokens(warm)
        return PrefillResult(
            prompt_tokens=_prompt_tokens(cold),
            cold_ttft_s=cold.ttft_s,
            warm_ttft_s=warm.ttft_s,
            cached_tokens=cached,
            cache_source=source,
        )

    async def _tool_call(self) -> ToolCallResult:
        try:
            return score_tool_call(await post_chat(self._endpoint, TOOL_CALL_REQUEST | _THINKING_OFF))
        except BenchmarkRequestError as exc:
            # A server that cannot take tools at all is a finding about the model, not a broken run.
            return ToolCallResult(called=False, valid=False, detail=str(exc))

    async def _questions(self) -> QuestionsResult:
        answers = []
        for question in OBJECTIVE_QUESTIONS:
            body = {
                "messages": [{"role": "user", "content": question.question}],
                "max_tokens": self._sizes.question_tokens,
                "temperature": 0,
                **_THINKING_OFF,
            }
            reply = _reply_text(await post_chat(self._endpoint, body))
            answers.append(
                QuestionAnswer(
                    question=question.question, answer=reply, correct=question.is_answered_by(reply)
                )
            )
        return QuestionsResult(
            correct=sum(answer.correct for answer in answers), asked=len(answers), answers=answers
        )


def _prompt_tokens(chat: StreamedChat) -> int:
    counted = chat.usage.get("prompt_tokens") if chat.usage else None
    return counted if isinstance(counted, int) else 0


def _cached_tokens(chat: StreamedChat) -> tuple[int | None, str]:
    """The prompt tokens the server says it reused: llama-server's ``timings.cache_n``, else usage's."""
    if chat.timings is not None and isinstance(chat.timings.get("cache_n"), int):
        return chat.timings["cache_n"], "timings.cache_n"
    details = chat.usage.get("prompt_tokens_details") if chat.usage else None
    if isinstance(details, Mapping) and isinstance(details.get("cached_tokens"), int):
        return details["cached_tokens"], "usage.prompt_tokens_details.cached_tokens"
    return None, "the server reports no cached prompt tokens"


def _reply_text(response: Mapping[str, Any]) -> str:
    choices = response.get("choices") or [{}]
    content = (choices[0].get("message") or {}).get("content")
    return content if isinstance(content, str) else ""
