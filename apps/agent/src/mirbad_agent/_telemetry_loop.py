"""The agent's telemetry loop: every few seconds, each model's ``/metrics`` into the telemetry ring.

Each sample also carries the memory the model's server measurably uses (its process's resident set,
its container's usage), so the portal can show it beside the budget admission reserved.
"""

from __future__ import annotations

import logging

import anyio
import httpx

from mirbad_protocol import MirbadError, ModelState
from mirbad_runtime import TelemetryRing, scrape

from ._lifecycle import ModelLifecycle
from ._runtimes import NodeRuntimes

__all__ = ["TelemetryCollector"]

logger = logging.getLogger(__name__)

_MIN_PASS_BOUND_S = 10.0


class TelemetryCollector:
    """Scrapes every Ready model into the ring, and frees the start slots of models past Starting.

    Args:
        runtimes: the composed drivers (statuses and upstreams).
        lifecycle: told about every status list, so admission slots are freed without a status call.
        ring: where samples go; a sample gets its rates from the model's previous one.
        http: the client for scrapes (the collector does not close it).
        scrape_timeout_s: bound on one model's scrape.
    """

    def __init__(
        self,
        runtimes: NodeRuntimes,
        lifecycle: ModelLifecycle,
        ring: TelemetryRing,
        http: httpx.AsyncClient,
        *,
        scrape_timeout_s: float = 5.0,
    ) -> None:
        self._runtimes = runtimes
        self._lifecycle = lifecycle
        self._ring = ring
        self._http = http
        self._scrape_timeout_s = scrape_timeout_s

    async def run(self, interval_s: float) -> None:
        """Scrape every ``interval_s`` seconds until cancelled; a failing pass is logged, never fatal."""
        bound = max(interval_s * 2, _MIN_PASS_BOUND_S)
        while True:
            with anyio.move_on_after(bound) as scope:
                try:
                    await self.scrape_once()
                except MirbadError as exc:
                    logger.warning("telemetry pass failed: %s", exc)
                except Exception:
                    logger.exception("telemetry pass failed")
            if scope.cancelled_caught:
                logger.warning("a telemetry pass took longer than %.0f s and was cut short", bound)
            await anyio.sleep(interval_s)

    async def scrape_once(self) -> None:
        """One pass: read every status, drop the samples of models gone, scrape the Ready ones."""
        statuses = await self._runtimes.list_statuses()
        self._lifecycle.settle(statuses)
        self._ring.retain({status.id for status in statuses if status.state is not ModelState.STOPPED})
        async with anyio.create_task_group() as group:
            for status in statuses:
                if status.state is ModelState.READY:
                    group.start_soon(self._scrape, status.id)

    async def _scrape(self, model_id: str) -> None:
        try:
            url, headers = await self._runtimes.upstream(model_id)
            sample = await scrape(
                self._http,
                url + "metrics",
                model_id=model_id,
                timeout_s=self._scrape_timeout_s,
                headers=headers,
            )
        except MirbadError as exc:
            # A model between health checks (stopping, restarting) has no metrics; the next pass retries.
            logger.debug("no metrics from %s: %s", model_id, exc)
            return
        memory = await self._measured(model_id)
        self._ring.add(sample.model_copy(update={"memory_bytes": memory}) if memory is not None else sample)

    async def _measured(self, model_id: str) -> int | None:
        # Bounded on its own: a slow `docker stats` on a busy dockerd must not hold the pass past its
        # bound, which would drop the metrics already scraped.
        try:
            with anyio.fail_after(self._scrape_timeout_s):
                return await self._runtimes.memory_bytes(model_id)
        except TimeoutError:
            logger.debug("no memory measure of %s within %.0f s", model_id, self._scrape_timeout_s)
            return None
        except MirbadError as exc:
            # A measure is extra: its failure must not cost the sample its metrics.
            logger.debug("no memory measure of %s: %s", model_id, exc)
            return None
