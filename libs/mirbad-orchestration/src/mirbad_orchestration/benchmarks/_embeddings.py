"""The embeddings suite, for pooling models: ``/v1/embeddings`` batches at N levels, and a shape check.

After an untimed warm-up, each level N (the fixed levels, then the configuration's max num seqs, at most
the cap) runs ``repetitions`` times: N requests at once, each a batch of 4 distinct inputs of mixed
lengths, unique per run (a random head) so no run can hit a cache another filled. Per run: input tok/s
(the usage's prompt tokens ÷ wall), req/s and the latency p50/p95 by nearest rank; per level, the
medians. A failed request is counted in its level, never fails the run. Every answer is checked: one
vector per input, one dimension, finite and non-zero; whether the vectors are unit length is reported.

The inputs are fitted to the model first. A runtime refuses an input longer than what one sequence can
hold (llama-server: its context per slot, and its physical batch, ``--ubatch-size``, since a pooling
model embeds an input in one pass) with a bare 500; so the suite works out that limit from the launch
arguments (:func:`embedding_input_limit`), measures the tokens per word of one short probe input, and
shortens the longer inputs to fit (the result's ``input_note`` says so). When even the probe cannot fit,
the run is refused before any timed request, saying which limit is too small.
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import anyio
import httpx

from mirbad_orchestration.exceptions import BenchmarkRequestError
from mirbad_protocol.benchmarks import EmbeddingLevel, EmbeddingsResult, PresetSizes
from mirbad_protocol.support import single_errors

from ._load import ChatEndpoint
from ._stats import median, nearest_rank
from ._suite import Progress

__all__ = ["EmbeddingsSuite", "InputLimit", "check_embeddings", "embedding_input_limit"]

_WORDS: Final = ("river", "stone", "cloud", "paper", "light", "metal", "glass", "field", "storm", "seed")
_UNIT_TOLERANCE: Final = 1e-3

# llama-server's defaults when the launch arguments do not say (its --batch-size and --ubatch-size).
_LLAMACPP_BATCH: Final = 2048
_LLAMACPP_UBATCH: Final = 512
# A word's tokens vary with the word; the fitted inputs keep this share of the limit as room.
_FIT_SHARE: Final = 0.8


class _RefusedError(BenchmarkRequestError):
    """The model answered an embeddings request with an error status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class InputLimit:
    """The most tokens one embeddings input may have, and which setting sets it (said in refusals)."""

    tokens: int
    reason: str


def _flag_value(argv: Sequence[str], *names: str) -> int | None:
    """The last integer value of any of ``names`` in ``argv`` (``--flag N`` or ``--flag=N``)."""
    found: int | None = None
    for index, arg in enumerate(argv):
        name, sep, inline = arg.partition("=")
        if name not in names:
            continue
        text = inline if sep else (argv[index + 1] if index + 1 < len(argv) else "")
        try:
            found = int(text)
        except ValueError:
            continue
    return found


def embedding_input_limit(runtime: str, argv: Sequence[str], max_model_len: int | None) -> InputLimit | None:
    """The longest input (in tokens) an instance launched with ``argv`` embeds; None when unknown.

    llama-server embeds an input in one pass of its physical batch (``--ubatch-size``, at most
    ``--batch-size``) within one slot's context (``--ctx-size`` / ``--parallel``); vLLM and MLX take
    up to the model's context (``--max-model-len``, else the definition's).
    """
    if runtime == "llamacpp":
        batch = _flag_value(argv, "--batch-size", "-b") or _LLAMACPP_BATCH
        ubatch = min(_flag_value(argv, "--ubatch-size", "-ub") or _LLAMACPP_UBATCH, batch)
        limits = [InputLimit(ubatch, f"llama-server's physical batch (--ubatch-size) of {ubatch} tokens")]
        ctx, slots = _flag_value(argv, "--ctx-size", "-c"), _flag_value(argv, "--parallel", "-np")
        per_slot = ctx // max(slots or 1, 1) if ctx else max_model_len
        if per_slot:
            limits.append(InputLimit(per_slot, f"the context of {per_slot} tokens per sequence"))
        return min(limits, key=lambda limit: limit.tokens)
    context = _flag_value(argv, "--max-model-len") or max_model_len
    return InputLimit(context, f"the context of {context} tokens") if context else None


def check_embeddings(document: Any, inputs: int) -> tuple[str, int | None, bool | None]:
    """Check an embeddings answer's shape: (what is wrong or "", the dimension, unit length)."""
    data = document.get("data") if isinstance(document, dict) else None
    if not isinstance(data, list) or len(data) != inputs:
        got = len(data) if isinstance(data, list) else "no"
        return f"{got} vectors for {inputs} inputs", None, None
    dimensions = set()
    unit = True
    for item in data:
        vector = item.get("embedding") if isinstance(item, dict) else None
        if not isinstance(vector, list) or not vector:
            return "an input has no vector", None, None
        if not all(isinstance(x, int | float) and math.isfinite(x) for x in vector):
            return "a vector holds a value that is not a finite number", None, None
        norm = math.sqrt(math.fsum(float(x) * float(x) for x in vector))
        if norm == 0:
            return "a vector is all zeros", None, None
        dimensions.add(len(vector))
        unit = unit and abs(norm - 1.0) <= _UNIT_TOLERANCE
    if len(dimensions) != 1:
        return f"the vectors have {len(dimensions)} different dimensions", None, None
    return "", dimensions.pop(), unit


class EmbeddingsSuite:
    """The embeddings suite over one endpoint (see the module).

    Args:
        endpoint: where the model answers (its ``served_name`` is the request's model).
        sizes: the levels, the cap and the repetitions.
        max_num_seqs: the configuration's max num seqs, the top level (unknown: the fixed levels only).
        progress: told each phase.
        input_limit: the longest input the instance embeds (:func:`embedding_input_limit`); None: the
            configured inputs are sent as they are.
    """

    def __init__(
        self,
        endpoint: ChatEndpoint,
        sizes: PresetSizes,
        *,
        max_num_seqs: int | None,
        progress: Progress | None = None,
        input_limit: InputLimit | None = None,
    ) -> None:
        self._endpoint = endpoint
        self._sizes = sizes
        self._max_num_seqs = max_num_seqs
        self._input_limit = input_limit
        self._input_words = list(sizes.embedding_input_words)
        self._input_note = ""
        self._progress = progress or Progress()
        self._problem = ""
        self._dimension: int | None = None
        self._unit: bool | None = None

    def levels(self) -> list[int]:
        """The levels: the fixed ones, then max num seqs (at most the cap) when it is not one of them."""
        levels = list(dict.fromkeys(self._sizes.embedding_levels))
        if self._max_num_seqs is not None:
            top = min(self._max_num_seqs, self._sizes.max_seqs_cap)
            if top not in levels:
                levels.append(top)
        return levels

    async def run(self) -> EmbeddingsResult:
        """Run the warm-up and every level.

        Raises:
            BenchmarkRequestError: the warm-up failed (the model does not embed at all), or even the
                shortest input does not fit the model's input limit (the message names the limit).
        """
        await self._progress.phase("warm-up")
        if self._input_limit is not None:
            await self._fit_inputs(self._input_limit)
        await self._embed(_batch(self._input_words))
        levels = [await self._level(n) for n in self.levels()]
        return EmbeddingsResult(
            levels=levels,
            vectors_valid=not self._problem,
            shape_detail=self._problem,
            dimension=self._dimension,
            unit_length=self._unit,
            input_note=self._input_note,
        )

    async def _fit_inputs(self, limit: InputLimit) -> None:
        """Shorten the inputs to ``limit``, by the tokens per word of one probe input (untimed)."""
        probe = min(self._input_words)
        refusal = (
            f"the embeddings suite cannot fit its inputs: the model takes at most {limit.tokens} tokens "
            f"per input ({limit.reason})"
        )
        try:
            _, tokens = await self._embed(_batch([probe]))
        except _RefusedError as exc:
            if exc.status != httpx.codes.INTERNAL_SERVER_ERROR:
                raise  # not a length problem (a model that does not embed answers 501, a bad body 4xx)
            # llama-server's answer to a too-long input is a bare 500; say what is too small instead.
            raise BenchmarkRequestError(f"{refusal}, and even an input of {probe} words was refused") from exc
        if tokens <= 0:
            return  # the answer has no usage: nothing to measure by, the inputs stay as configured
        # The probe's tokens include its random head, so per word this errs long: a fitted input is short.
        per_word = tokens / probe
        most = int(limit.tokens * _FIT_SHARE / per_word)
        if most < 1:
            raise BenchmarkRequestError(f"{refusal}; one word of its inputs is about {per_word:.0f} tokens")
        fitted = [min(words, most) for words in self._input_words]
        if fitted != self._input_words:
            self._input_note = (
                f"inputs of {', '.join(map(str, self._input_words))} words cut to "
                f"{', '.join(map(str, fitted))} to fit {limit.tokens} tokens per input ({limit.reason})"
            )
            self._input_words = fitted

    async def _embed(self, inputs: list[str]) -> tuple[float, int]:
        """One request: its latency and prompt tokens; the shape is checked on the way."""
        url = f"{self._endpoint.base_url}v1/embeddings"
        body = {"model": self._endpoint.served_name, "input": inputs}
        started = time.perf_counter()
        try:
            with anyio.fail_after(self._endpoint.timeout_s):
                response = await self._endpoint.client.post(
                    url, json=body, headers=dict(self._endpoint.headers), timeout=self._endpoint.timeout_s
                )
        except (httpx.HTTPError, TimeoutError) as exc:
            raise BenchmarkRequestError(f"an embeddings request failed: {exc or type(exc).__name__}") from exc
        latency = time.perf_counter() - started
        if response.status_code != 200:
            status = response.status_code
            raise _RefusedError(status, f"the model answered {status}: {response.text[:300]}")
        document = response.json()
        problem, dimension, unit = check_embeddings(document, len(inputs))
        if problem:
            self._problem = self._problem or problem
        elif self._dimension not in (None, dimension):
            self._problem = self._problem or f"the dimension changed from {self._dimension} to {dimension}"
        else:
            self._dimension = dimension
            self._unit = unit if self._unit is None else self._unit and bool(unit)
        usage = document.get("usage") if isinstance(document, dict) else None
        tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        return latency, tokens if isinstance(tokens, int) else 0

    async def _level(self, concurrency: int) -> EmbeddingLevel:
        speeds: list[float] = []
        rates: list[float] = []
        p50s: list[float] = []
        p95s: list[float] = []
        failed = 0
        for run in range(1, self._sizes.repetitions + 1):
            await self._progress.phase("embeddings", concurrency=concurrency, run=run)
            done, failures, wall = await self._run_once(concurrency)
            failed += failures
            if not done or wall <= 0:
                continue
            latencies = [latency for latency, _ in done]
            speeds.append(sum(tokens for _, tokens in done) / wall)
            rates.append(len(done) / wall)
            p50s.append(nearest_rank(latencies, 50))
            p95s.append(nearest_rank(latencies, 95))
        return EmbeddingLevel(
            concurrency=concurrency,
            requests=concurrency * self._sizes.repetitions,
            failed=failed,
            input_tokens_per_s=_median_or_none(speeds),
            requests_per_s=_median_or_none(rates),
            latency_p50_s=_median_or_none(p50s),
            latency_p95_s=_median_or_none(p95s),
        )

    async def _run_once(self, concurrency: int) -> tuple[list[tuple[float, int]], int, float]:
        """N requests at once: each success's (latency, tokens), the failures and the wall time."""
        done: list[tuple[float, int]] = []
        failures = 0

        async def one(inputs: list[str]) -> None:
            nonlocal failures
            try:
                done.append(await self._embed(inputs))
            except BenchmarkRequestError:
                failures += 1

        started = time.perf_counter()
        with single_errors():
            async with anyio.create_task_group() as tasks:
                for _ in range(concurrency):
                    tasks.start_soon(one, _batch(self._input_words))
        return done, failures, time.perf_counter() - started


def _batch(lengths: Sequence[int]) -> list[str]:
    # A random head per input: unique per run, so no input was ever embedded (or cached) before.
    return [
        f"{secrets.token_hex(6)} " + " ".join(_WORDS[(i + k) % len(_WORDS)] for i in range(words))
        for k, words in enumerate(lengths)
    ]


def _median_or_none(values: Sequence[float]) -> float | None:
    return median(values) if values else None
