"""Every change of the tuning room, whoever asks (``/api``, the portal): start, cancel, Apply best.

Each writes its audit line once the change is made; a refused one writes none (as before the rooms).
Apply best saves through the models' own write path, so the model's edit is audited there too.
"""

from __future__ import annotations

from mirbad_master._composition import MasterServices
from mirbad_master.models.actions import update_model
from mirbad_orchestration.exceptions import NoTuningRunError
from mirbad_orchestration.tuning import apply_best
from mirbad_protocol import ModelDefinition
from mirbad_protocol.tuning import TuningJobView, TuningRequest

__all__ = ["apply_tuning_run", "cancel_tuning", "start_tuning"]


async def start_tuning(
    services: MasterServices, model_id: str, request: TuningRequest, *, actor: str
) -> TuningJobView:
    """Start a tuning run of ``model_id``, audited as ``model.tune``.

    Raises:
        MirbadError: the start was refused (see :meth:`~mirbad_orchestration.tuning.TuningJobs.start`).
    """
    job = await services.tuning.start(model_id, request)
    detail = f"job {job.id}, goal {job.goal}, steps {', '.join(job.steps)}"
    detail += f", preset {job.preset}" if job.preset else ""
    await services.audit.record(actor, "model.tune", model_id, node_id=job.node_id, detail=detail)
    return job


async def cancel_tuning(services: MasterServices, node_id: str | None, *, actor: str) -> list[TuningJobView]:
    """Cancel the running tuning run of ``node_id`` (every one without), audited as ``model.tune.cancel``.

    The saved settings are restored before it ends.

    Raises:
        NoJobRunningError: none runs there.
    """
    cancelled = await services.tuning.cancel(node_id)
    await services.audit.record_jobs(actor, "model.tune.cancel", cancelled)
    return cancelled


async def apply_tuning_run(
    services: MasterServices, model_id: str, run: str | None, *, actor: str
) -> ModelDefinition:
    """Save run ``run``'s (None: the newest's) tuned settings onto ``model_id``: Apply best.

    Raises:
        UnknownModelError: no such model.
        NoTuningRunError: the model has no such run, or the run's baseline won (nothing to apply).
    """
    saved = await services.models.get(model_id)
    listing = await services.tuning_results.list(model_id)
    name = run or (listing.files[0] if listing.files else None)
    if name is None:
        raise NoTuningRunError(f"model {model_id!r} has no tuning run")
    found = await services.tuning_results.load(model_id, name)
    if found.best_definition is None:
        raise NoTuningRunError(f"tuning run {name!r} kept the saved settings: there is nothing to apply")
    stored = await update_model(services, apply_best(saved, found.best_definition), actor)
    await services.audit.record(actor, "model.tune.apply", model_id, detail=name)
    return stored
