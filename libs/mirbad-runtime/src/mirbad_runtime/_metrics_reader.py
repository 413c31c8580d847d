"""Reading a model server's Prometheus ``/metrics`` (vLLM's ``vllm:*``, llama-server's ``llamacpp:*``)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Final

import anyio
import httpx
from prometheus_client.parser import text_string_to_metric_families

from mirbad_protocol import ModelMetrics

from .exceptions import MetricsReadError

__all__ = ["METRIC_SERIES", "parse_metrics", "scrape", "with_rates"]

METRIC_SERIES: Final[Mapping[str, tuple[str, ...]]] = {
    "requests_running": ("vllm:num_requests_running", "llamacpp:requests_processing"),
    "requests_waiting": ("vllm:num_requests_waiting", "llamacpp:requests_deferred"),
    "kv_cache_usage": (
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "llamacpp:kv_cache_usage_ratio",
    ),
    "prompt_tokens_total": ("vllm:prompt_tokens_total", "llamacpp:prompt_tokens_total"),
    "generation_tokens_total": ("vllm:generation_tokens_total", "llamacpp:tokens_predicted_total"),
    "prefix_cache_hits_total": ("vllm:prefix_cache_hits_total",),
    "decode_calls_total": ("llamacpp:n_decode_total",),
}
"""For each :class:`~mirbad_protocol.ModelMetrics` field, the sample names that feed it, first found wins.

Names are sample names, not family names: prometheus_client's parser files a counter's family under
the name without ``_total`` (and, for a ``# TYPE x counter`` line followed by ``x_total`` samples, as a
separate untyped family), but the samples always keep ``_total``, so matching samples reads both.
vLLM renamed ``gpu_cache_usage_perc`` to ``kv_cache_usage_perc``; current llama-server builds no longer
export ``kv_cache_usage_ratio``, which then reads as unknown (None).
"""

_RATIO_FIELDS: Final = frozenset({"kv_cache_usage"})
_DEFAULT_TIMEOUT_S: Final = 5.0


def _utc_now() -> datetime:
    return datetime.now(UTC)


def parse_metrics(text: str, *, model_id: str, at: datetime) -> ModelMetrics:
    """Reduce one ``/metrics`` page to a :class:`~mirbad_protocol.ModelMetrics` without rates.

    Every label set of a series is combined: counts and counters are summed (a server serving several
    names, or vLLM's data-parallel engines, reports one series each), while the KV-cache usage, a
    fraction per engine, takes the highest value, because the fullest engine is the one that queues.
    Non-finite samples are skipped. A series that is absent leaves the field at its default.

    Args:
        text: the Prometheus text exposition.
        model_id: the model the page belongs to.
        at: when it was scraped.

    Raises:
        MetricsReadError: the text is not Prometheus exposition format.
    """
    samples = _samples_by_name(text)
    values: dict[str, float] = {}
    for field, names in METRIC_SERIES.items():
        name = next((name for name in names if samples.get(name)), None)
        if name is not None:
            found = samples[name]
            values[field] = max(found) if field in _RATIO_FIELDS else math.fsum(found)
    return ModelMetrics.model_validate({"model_id": model_id, "at": at, **values})


def _samples_by_name(text: str) -> dict[str, list[float]]:
    wanted = {name for names in METRIC_SERIES.values() for name in names}
    samples: defaultdict[str, list[float]] = defaultdict(list)
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in wanted and math.isfinite(sample.value):
                    samples[sample.name].append(float(sample.value))
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        # prometheus_client reports malformed text with whichever of these its parsing step hit.
        raise MetricsReadError(f"not Prometheus text: {str(exc) or type(exc).__name__}") from exc
    return samples


def with_rates(current: ModelMetrics, previous: ModelMetrics | None) -> ModelMetrics:
    """``current`` with its token rates computed from the scrape before it.

    A rate is the counter's increase divided by the seconds between the two scrapes. It stays None
    when there is no earlier scrape, when either scrape lacks the counter, when time did not move
    forward, or when the counter went down (the server restarted and began again from zero): one
    interval without a rate is better than a negative or made-up one.
    """
    if previous is None:
        return current
    elapsed = (current.at - previous.at).total_seconds()
    return current.model_copy(
        update={
            "prompt_tokens_per_second": _rate(
                current.prompt_tokens_total, previous.prompt_tokens_total, elapsed
            ),
            "generation_tokens_per_second": _rate(
                current.generation_tokens_total, previous.generation_tokens_total, elapsed
            ),
        }
    )


def _rate(current: float | None, previous: float | None, elapsed: float) -> float | None:
    if current is None or previous is None or elapsed <= 0 or current < previous:
        return None
    return (current - previous) / elapsed


async def scrape(
    client: httpx.AsyncClient,
    url: str,
    *,
    model_id: str,
    timeout_s: float = _DEFAULT_TIMEOUT_S,
    headers: Mapping[str, str] | None = None,
    clock: Callable[[], datetime] = _utc_now,
) -> ModelMetrics:
    """GET a model's metrics page and parse it (no rates: see :func:`with_rates`).

    Args:
        client: the client to send the request with (the agent shares one).
        url: the full URL of the metrics page, e.g. ``http://127.0.0.1:8001/metrics``.
        model_id: the model the page belongs to.
        timeout_s: the limit in seconds for the whole exchange, body included.
        headers: extra request headers (a llama-server started with an API key wants it here).
        clock: the time stamped on the sample, read when the response has arrived.

    Raises:
        MetricsReadError: the server could not be reached, answered with an error status, took longer
            than ``timeout_s`` or returned something that is not Prometheus text.
    """
    try:
        with anyio.fail_after(timeout_s):
            response = await client.get(url, headers=dict(headers or {}), timeout=timeout_s)
            response.raise_for_status()
    except TimeoutError:
        raise MetricsReadError(f"no answer within {timeout_s:g} s", url=url) from None
    except httpx.HTTPStatusError as exc:
        raise MetricsReadError(f"HTTP {exc.response.status_code}", url=url) from exc
    except httpx.HTTPError as exc:
        raise MetricsReadError(f"{type(exc).__name__}: {exc}", url=url) from exc
    try:
        return parse_metrics(response.text, model_id=model_id, at=clock())
    except MetricsReadError as exc:
        raise MetricsReadError(exc.reason, url=url) from exc.__cause__
