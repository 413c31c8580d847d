"""The embeddings suite, for pooling models: ``/v1/embeddings`` batches at N levels, and a shape check.

After an untimed warm-up, each level N (the fixed levels, then the configuration's max num seqs, at most
the cap) runs ``repetitions`` times: N requests at once, each a batch of 4 distinct inputs of mixed
lengths, unique per run (a random head) so no run can hit a cache another filled. Per run: input tok/s
(the usage's prompt tokens ÷ wall), req/s and the latency p50/p95 by nearest rank; per level, the
medians. A failed request is counted in its level, never fails the run. Every answer is checked: one
vector per input, one dimension, finite and non-zero; whether the vectors are unit length is reported.
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Sequence
from typing import Any, Final

import anyio
import httpx

from mirbad_orchestration.exceptions import BenchmarkRequestError
from mirbad_protocol import EmbeddingLevel, EmbeddingsResult, PresetSizes, single_errors

from ._load import ChatEndpoint
from ._stats import median, nearest_rank
from ._suite import Progress

__all__ = ["EmbeddingsSuite", "check_embeddings"]

_WORDS: Final = ("river", "stone", "cloud", "paper", "light", "metal", "glass", "field", "storm", "seed")
_UNIT_TOLERANCE: Final = 1e-3


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
    """

    def __init__(
        self,
        endpoint: ChatEndpoint,
        sizes: PresetSizes,
        *,
        max_num_seqs: int | None,
        progress: Progress | None = None,
    ) -> None:
        self._endpoint = endpoint
        self._sizes = sizes
        self._max_num_seqs = max_num_seqs
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
            BenchmarkRequestError: the warm-up failed (the model does not embed at all).
        """
        await self._progress.phase("warm-up")
        await self._embed(_batch(self._sizes.embedding_input_words))
        levels = [await self._level(n) for n in self.levels()]
        return EmbeddingsResult(
            levels=levels,
            vectors_valid=not self._problem,
            shape_detail=self._problem,
            dimension=self._dimension,
            unit_length=self._unit,
        )

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
            raise BenchmarkRequestError(f"the model answered {response.status_code}: {response.text[:300]}")
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
                    tasks.start_soon(one, _batch(self._sizes.embedding_input_words))
        return done, failures, time.perf_counter() - started


def _batch(lengths: Sequence[int]) -> list[str]:
    # A random head per input: unique per run, so no input was ever embedded (or cached) before.
    return [
        f"{secrets.token_hex(6)} " + " ".join(_WORDS[(i + k) % len(_WORDS)] for i in range(words))
        for k, words in enumerate(lengths)
    ]


def _median_or_none(values: Sequence[float]) -> float | None:
    return median(values) if values else None
