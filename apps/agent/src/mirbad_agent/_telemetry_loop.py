"""The agent's telemetry loop: every few seconds, each model's ``/metrics`` into the telemetry ring.

Each sample also carries the memory the model's server measurably uses (its process's resident set,
its container's usage), so the portal can show it beside the budget admission reserved, and the GPU
memory of its compute processes as the GPU reports them: the GPU processes are read once per pass
(hostd first, else nvidia-smi here) and put on the models by container or process tree
(:func:`mirbad_runtime.model_gpu_bytes`). What no model owns and runs in a systemd service is summed
per service into the pass's host sample (:func:`mirbad_runtime.service_gpu_memory`), so the GPU's
memory reads as models plus named host services. On a node with an NVIDIA GPU whose processes could
not be listed at all (hostd missing, older or failing, and no working nvidia-smi here), each Ready
model's sample carries its budget instead, with the source ``budget``; a node without an NVIDIA GPU
has no GPU memory to estimate and its samples carry none.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import anyio
import anyio.to_thread
import httpx

from mirbad_protocol import MirbadError, ModelState, ModelStatus
from mirbad_protocol.agent import GPU_MEMORY_FROM_BUDGET, HostGpuSample, ServiceGpuMemory
from mirbad_runtime import (
    GpuOwner,
    GpuProcessProbe,
    GpuProcessReading,
    TelemetryRing,
    model_gpu_bytes,
    parent_pid,
    scrape,
    service_gpu_memory,
)

from ._lifecycle import ModelLifecycle
from ._runtimes import NodeRuntimes

__all__ = ["TelemetryCollector"]

logger = logging.getLogger(__name__)

_MIN_PASS_BOUND_S = 10.0
_GIB = 1024**3


class TelemetryCollector:
    """Scrapes every Ready model into the ring, and frees the start slots of models past Starting.

    Args:
        runtimes: the composed drivers (statuses and upstreams).
        lifecycle: told about every status list, so admission slots are freed without a status call.
        ring: where samples go; a sample gets its rates from the model's previous one.
        http: the client for scrapes (the collector does not close it).
        scrape_timeout_s: bound on one model's scrape.
        gpu: lists the GPU's compute processes; None: samples carry no GPU memory.
        gpu_timeout_s: bound on that read (hostd's telemetry bound is 3 s; nvidia-smi's own is 5 s).
        parent_of: a process's parent, for native models' process trees (a test's fake tree).
        gpu_present: whether the node has an NVIDIA GPU (blocking; :func:`mirbad_runtime.nvidia_gpu_present`):
            where it has and no GPU processes were read, samples carry each model's budget instead.
            None: the node has none.
    """

    def __init__(
        self,
        runtimes: NodeRuntimes,
        lifecycle: ModelLifecycle,
        ring: TelemetryRing,
        http: httpx.AsyncClient,
        *,
        scrape_timeout_s: float = 5.0,
        gpu: GpuProcessProbe | None = None,
        gpu_timeout_s: float = 6.0,
        parent_of: Callable[[int], int | None] = parent_pid,
        gpu_present: Callable[[], bool] | None = None,
    ) -> None:
        self._runtimes = runtimes
        self._lifecycle = lifecycle
        self._ring = ring
        self._http = http
        self._scrape_timeout_s = scrape_timeout_s
        self._gpu = gpu
        self._gpu_timeout_s = gpu_timeout_s
        self._parent_of = parent_of
        self._gpu_present = gpu_present

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
        ready = [status for status in statuses if status.state is ModelState.READY]
        gpu = await self._gpu_memory([status.id for status in ready])
        if gpu is None:
            gpu = await self._budgets(ready)
        async with anyio.create_task_group() as group:
            for status in ready:
                group.start_soon(self._scrape, status.id, gpu.get(status.id, {}))

    async def _gpu_memory(self, model_ids: list[str]) -> dict[str, dict[str, Any]] | None:
        # The sample fields of each model from a GPU reading; None when no reading was had. The host
        # services' share goes into the ring as the pass's host sample, with or without models.
        if self._gpu is None:
            return None
        with anyio.move_on_after(self._gpu_timeout_s):
            try:
                reading = await self._gpu.read()
            except MirbadError as exc:
                logger.debug("no GPU processes read: %s", exc)
                return None
            if reading is None:
                return None
            at = datetime.now(UTC)
            owners = {model_id: await self._owner(model_id) for model_id in model_ids}
            found, services = await anyio.to_thread.run_sync(self._attributed, reading, owners)
            # Stored before any scrape of this pass, so a master reading mid-pass never gets a model
            # sample newer than a host sample it has not seen yet (one `since` serves both).
            self._ring.add_host(HostGpuSample(at=at, source=reading.source, services=services))
            return {
                model_id: {"gpu_memory_bytes": used, "gpu_memory_source": reading.source}
                for model_id, used in found.items()
            }
        logger.debug("no GPU processes read within %.0f s", self._gpu_timeout_s)
        return None

    async def _budgets(self, ready: list[ModelStatus]) -> dict[str, dict[str, Any]]:
        # The spec's fallback is about GPU memory: only a node with a GPU has any to estimate.
        if self._gpu_present is None or not ready:
            return {}
        if not await anyio.to_thread.run_sync(self._gpu_present):
            return {}
        return {
            status.id: {
                "gpu_memory_bytes": round(status.budget_gib * _GIB),
                "gpu_memory_source": GPU_MEMORY_FROM_BUDGET,
            }
            for status in ready
            if status.budget_gib is not None
        }

    async def _owner(self, model_id: str) -> GpuOwner | None:
        try:
            return await self._runtimes.gpu_owner(model_id)
        except MirbadError as exc:
            logger.debug("no GPU owner of %s: %s", model_id, exc)
            return None

    def _attributed(
        self, reading: GpuProcessReading, owners: Mapping[str, GpuOwner | None]
    ) -> tuple[dict[str, int | None], list[ServiceGpuMemory]]:
        # Blocking: the ancestry walk reads /proc. A model whose owner is unknown gets no GPU fields.
        known = {model_id: owner for model_id, owner in owners.items() if owner is not None}
        models = model_gpu_bytes(reading.processes, known, self._parent_of)
        return models, service_gpu_memory(reading.processes, known, self._parent_of)

    async def _scrape(self, model_id: str, gpu: Mapping[str, Any]) -> None:
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
        update = {**gpu, "memory_bytes": memory} if memory is not None else dict(gpu)
        self._ring.add(sample.model_copy(update=update) if update else sample)

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
