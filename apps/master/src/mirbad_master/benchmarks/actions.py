"""Every change of the benchmarks room, whoever asks (``/api``, the portal): start and cancel a job.

Each writes its audit line once the change is made; a refused start or cancel writes none (as
before the rooms: the refusal is the caller's answer).
"""

from __future__ import annotations

from mirbad_master._composition import MasterServices
from mirbad_protocol.benchmarks import BenchmarkJobView, SloGuards

__all__ = ["cancel_benchmarks", "start_benchmark"]


async def start_benchmark(
    services: MasterServices,
    model_id: str,
    *,
    preset: str | None = None,
    guards: SloGuards | None = None,
    actor: str,
) -> BenchmarkJobView:
    """Start a benchmark of ``model_id`` with its current settings, audited as ``model.benchmark``.

    Raises:
        MirbadError: the start was refused (see :meth:`~mirbad_orchestration.jobs.BenchmarkJobs.start`).
    """
    job = await services.jobs.start(model_id, preset=preset, guards=guards)
    detail = f"job {job.id}" + (f", preset {preset}" if preset else "")
    await services.audit.record(actor, "model.benchmark", model_id, node_id=job.node_id, detail=detail)
    return job


async def cancel_benchmarks(
    services: MasterServices, node_id: str | None, *, actor: str
) -> list[BenchmarkJobView]:
    """Cancel the running benchmark of ``node_id`` (every one without), audited as ``model.benchmark.cancel``.

    Raises:
        NoJobRunningError: none runs there.
    """
    cancelled = await services.jobs.cancel(node_id)
    await services.audit.record_jobs(actor, "model.benchmark.cancel", cancelled)
    return cancelled
