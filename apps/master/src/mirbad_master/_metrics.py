"""``/metrics``: the master's state in the Prometheus text format.

What is exposed (memory in bytes, the Prometheus base unit):

* ``mirbad_router_requests_total``, ``mirbad_router_requests_failed_total``,
  ``mirbad_router_requests_in_flight`` per served name (``model``);
* ``mirbad_model_state`` per model, node and state: 1 for the current state, 0 for the others;
  ``mirbad_model_restart_paused`` 1 while a model's automatic restarts are paused;
  ``mirbad_model_progress`` per model, node and state (``Stalled``, ``Slow``): 1 while a Ready model is
  flagged so from its metrics history, 0 otherwise;
* ``mirbad_node_reachable`` and ``mirbad_node_memory_{total,available,reserve}_bytes`` per node;
* ``mirbad_api_key_requests_total``, ``mirbad_api_key_prompt_tokens_total`` and
  ``mirbad_api_key_completion_tokens_total`` per served name, summed over the keys; per key id and
  served name only with the ``metrics_key_ids`` setting (``/metrics`` needs no sign-in, and a key id
  tells a scraper who uses the fleet and how much). Never names or secrets.

Each scrape gathers one snapshot (asynchronously: key usage is read from its store) and renders it
through a registry of its own, so nothing is global and two masters in one process never mix.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Final

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from mirbad_protocol import ModelState
from mirbad_protocol.admin import KeyUsage

from ._composition import MasterServices
from ._views import StatusReport, status_report

__all__ = ["METRICS_MEDIA_TYPE", "MetricsSnapshot", "collect_metrics", "render_metrics"]

METRICS_MEDIA_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
"""The media type of the text exposition format."""

_GIB: Final = 1024**3
_PROGRESS_STATES: Final = ("Stalled", "Slow")


@dataclass(frozen=True)
class MetricsSnapshot:
    """Everything one scrape exposes.

    Attributes:
        status: the fleet's status.
        usage: the API keys' usage.
        key_ids: label the key usage with key ids (else it is summed per served name).
    """

    status: StatusReport
    usage: list[KeyUsage]
    key_ids: bool = False


async def collect_metrics(services: MasterServices) -> MetricsSnapshot:
    """Read what the next scrape exposes (caches and the key usage counted so far)."""
    return MetricsSnapshot(
        status=await status_report(services),
        usage=await services.keys.usage(),
        key_ids=services.settings.metrics_key_ids,
    )


def render_metrics(snapshot: MetricsSnapshot) -> bytes:
    """``snapshot`` in the Prometheus text exposition format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_SnapshotCollector(snapshot))
    return generate_latest(registry)


class _SnapshotCollector(Collector):
    def __init__(self, snapshot: MetricsSnapshot) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterable[Metric]:
        yield from self._router()
        yield from self._models()
        yield from self._nodes()
        yield from self._keys()

    def _router(self) -> Iterator[Metric]:
        total = CounterMetricFamily("mirbad_router_requests", "Requests forwarded by /v1.", labels=["model"])
        failed = CounterMetricFamily(
            "mirbad_router_requests_failed",
            "Forwarded requests that failed (non-2xx or broken).",
            labels=["model"],
        )
        flight = GaugeMetricFamily(
            "mirbad_router_requests_in_flight", "Requests being answered.", labels=["model"]
        )
        for row in self._snapshot.status.router:
            total.add_metric([row.served_name], row.total)
            failed.add_metric([row.served_name], row.failed)
            flight.add_metric([row.served_name], row.in_flight)
        yield from (total, failed, flight)

    def _models(self) -> Iterator[Metric]:
        state = GaugeMetricFamily(
            "mirbad_model_state",
            "1 for the model's current state, 0 for the others.",
            labels=["model", "node", "state"],
        )
        for status in self._snapshot.status.models:
            for candidate in ModelState:
                state.add_metric(
                    [status.id, status.node_id or "", candidate.value], float(candidate is status.state)
                )
        paused = GaugeMetricFamily(
            "mirbad_model_restart_paused",
            "1 while automatic restarts are paused after crashes.",
            labels=["model"],
        )
        for pause in self._snapshot.status.pauses:
            paused.add_metric([pause.model_id], 1.0)
        progress = GaugeMetricFamily(
            "mirbad_model_progress",
            "1 while a Ready model is Stalled or Slow by its metrics history, 0 otherwise.",
            labels=["model", "node", "state"],
        )
        for status in self._snapshot.status.models:
            for flag in _PROGRESS_STATES:
                progress.add_metric([status.id, status.node_id or "", flag], float(status.progress == flag))
        yield from (state, paused, progress)

    def _nodes(self) -> Iterator[Metric]:
        reachable = GaugeMetricFamily(
            "mirbad_node_reachable", "1 when the node's agent answered.", labels=["node"]
        )
        memory = {
            kind: GaugeMetricFamily(
                f"mirbad_node_memory_{kind}_bytes", f"The node's {kind} memory.", labels=["node"]
            )
            for kind in ("total", "available", "reserve")
        }
        for node in self._snapshot.status.nodes:
            reachable.add_metric([node.id], float(node.reachable))
            if node.memory is not None:
                memory["total"].add_metric([node.id], node.memory.total_gib * _GIB)
                memory["available"].add_metric([node.id], node.memory.available_gib * _GIB)
                memory["reserve"].add_metric([node.id], node.memory.reserve_gib * _GIB)
        yield reachable
        yield from memory.values()

    def _keys(self) -> Iterator[Metric]:
        labels = ["key_id", "model"] if self._snapshot.key_ids else ["model"]
        requests = CounterMetricFamily(
            "mirbad_api_key_requests", "Requests per API key and model.", labels=labels
        )
        prompt = CounterMetricFamily(
            "mirbad_api_key_prompt_tokens", "Prompt tokens per API key.", labels=labels
        )
        completion = CounterMetricFamily(
            "mirbad_api_key_completion_tokens", "Completion tokens per API key.", labels=labels
        )
        totals: dict[tuple[str, ...], Counter[str]] = {}
        for usage in self._snapshot.usage:
            key: tuple[str, ...] = (
                (usage.key_id, usage.served_name) if self._snapshot.key_ids else (usage.served_name,)
            )
            total = totals.setdefault(key, Counter())
            total.update(
                requests=usage.requests, prompt=usage.prompt_tokens, completion=usage.completion_tokens
            )
        for labelled, total in totals.items():
            requests.add_metric(list(labelled), total["requests"])
            prompt.add_metric(list(labelled), total["prompt"])
            completion.add_metric(list(labelled), total["completion"])
        yield from (requests, prompt, completion)
