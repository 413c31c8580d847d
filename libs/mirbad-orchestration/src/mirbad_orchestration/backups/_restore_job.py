"""The restore job: one at a time, fleet-wide, cancellable, with live progress.

A restore upserts the backup's models, merges its API keys, merges its host services, then, per node
and side by side across nodes, brings each model's missing folders back one download at a time
through that node's agent and starts the models that start by themselves once all their folders are
there (one start at a time per node: each node's models go in turn). A start that meets another start
is tried again; a start the node refuses for memory leaves the model stopped and says so. Cancelling
stops the download in flight on its node. Nodes, the master identity and the CA are never touched.

It is not a kind of :class:`~mirbad_orchestration.jobs.NodeJobs`: that runner holds one node in
maintenance for one model (``/v1`` refuses the model meanwhile), while a restore spans the fleet
and must leave every node serving. Its view keeps the same progress shape (``id``, ``state``,
``eta_s``, ``started_at``, ``finished_at``, ``error``).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

import anyio
from anyio.abc import TaskGroup, TaskStatus

from mirbad_orchestration.exceptions import (
    AgentAdmissionRefusedError,
    AgentStartConflictError,
    NoRestoreJobError,
    RestoreRunningError,
    StartLaneBusyError,
)
from mirbad_orchestration.fleet import LOCAL_NODE_ID
from mirbad_protocol import MirbadError, ModelDefinition, ModelSource
from mirbad_protocol.admin import ApiKeyRecord
from mirbad_protocol.benchmarks import JobState
from mirbad_protocol.restore import RestoreJobView, RestoreModelProgress

from ._document import BackupDocument
from ._import import backup_host_services, backup_models, import_host_services, import_keys, import_models
from ._restore_host import RestoreHost, checked_folders, download_request, folder_plan

__all__ = ["RestoreJobs", "RestoreTimings"]

_logger = logging.getLogger(__name__)
_FINISHED: Final = ("completed",)
_STOPPED: Final = ("failed", "cancelled")
_UNFINISHED: Final = ("pending", "downloading", "starting")
_CANCEL_TIMEOUT_S: Final = 10.0


@dataclass(frozen=True)
class RestoreTimings:
    """The restore's waits (the tests shorten them).

    Attributes:
        poll_s: how often a download's progress is read.
        download_timeout_s: the longest one folder may take to download.
        start_retries: how many times a start that met another start is tried again.
        start_retry_s: the wait before each of those tries.
    """

    poll_s: float = 0.5
    download_timeout_s: float = 6 * 3600.0
    start_retries: int = 10
    start_retry_s: float = 3.0


class RestoreJobs:
    """The one restore job of the master, run in its task group.

    Args:
        host: the master's stores, nodes and start path.
        timings: the waits.
        clock: the current time (timezone-aware).
    """

    def __init__(
        self,
        host: RestoreHost,
        *,
        timings: RestoreTimings | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self._host = host
        self._timings = timings or RestoreTimings()
        self._clock = clock or (lambda: datetime.now(UTC))
        self._tasks: TaskGroup | None = None
        self._view: RestoreJobView | None = None
        self._scope: anyio.CancelScope | None = None
        self._done = anyio.Event()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve restore jobs until cancelled (the master's task group runs this)."""
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            task_status.started()
            try:
                await anyio.sleep_forever()
            finally:
                self._tasks = None

    def view(self) -> RestoreJobView:
        """The running job, or the last one, with its progress.

        Raises:
            NoRestoreJobError: no restore has run since the master started.
        """
        if self._view is None:
            raise NoRestoreJobError("no restore has run since the master started")
        return self._view

    def start(
        self,
        document: BackupDocument,
        keys: Sequence[ApiKeyRecord] | None,
        *,
        actor: str,
        bootstrap_node_id: str = LOCAL_NODE_ID,
    ) -> RestoreJobView:
        """Start restoring ``document`` (with its opened ``keys``, if any) and return the job.

        A version 1 backup's models go to ``bootstrap_node_id`` (the node that stands for the single
        machine that wrote it).

        Raises:
            RestoreRunningError: a restore runs already.
        """
        if self._view is not None and self._view.state == "running":
            raise RestoreRunningError(self._view.id)
        if self._tasks is None:
            raise RuntimeError("RestoreJobs.run is not running")
        self._view = RestoreJobView(
            id="restore-" + secrets.token_hex(6),
            actor=actor,
            schema_version=document.schema_version,
            backup_host=document.host,
            started_at=self._clock(),
        )
        self._scope = anyio.CancelScope()
        self._done = anyio.Event()
        models = backup_models(document, bootstrap_node_id=bootstrap_node_id)
        self._tasks.start_soon(self._guarded, document, models, keys, actor, self._scope, self._done)
        return self._view

    async def cancel(self, *, timeout_s: float = 30.0) -> RestoreJobView:
        """Cancel the running job (the download in flight is stopped on its node) and wait for its end.

        Raises:
            NoRestoreJobError: no restore runs.
        """
        if self._view is None or self._view.state != "running" or self._scope is None:
            raise NoRestoreJobError("no restore is running")
        self._scope.cancel()
        with anyio.fail_after(timeout_s):
            await self._done.wait()
        return self.view()

    async def wait(self, *, timeout_s: float) -> RestoreJobView:
        """Wait until the current job ends, at most ``timeout_s`` seconds."""
        with anyio.fail_after(timeout_s):
            await self._done.wait()
        return self.view()

    def _update(self, **changes: object) -> None:
        assert self._view is not None
        self._view = self._view.model_copy(update=changes)

    def _progress(self, model_id: str, **changes: object) -> None:
        assert self._view is not None
        models = [m.model_copy(update=changes) if m.model_id == model_id else m for m in self._view.models]
        self._update(models=models)

    async def _guarded(
        self,
        document: BackupDocument,
        models: list[ModelDefinition],
        keys: Sequence[ApiKeyRecord] | None,
        actor: str,
        scope: anyio.CancelScope,
        done: anyio.Event,
    ) -> None:
        try:
            with scope:
                await self._restore(document, models, keys, actor)
            if scope.cancelled_caught:
                self._end("cancelled", "cancelled")
            else:
                self._update(phase="done")
                self._end("succeeded", None)
        except MirbadError as exc:
            self._end("failed", str(exc))
        except Exception as exc:
            _logger.exception("restore failed")
            self._end("failed", f"{type(exc).__name__}: {exc}")
        finally:
            if self._view is not None and self._view.state == "running":
                self._end("cancelled", "the master stopped")
            done.set()

    def _end(self, state: JobState, error: str | None) -> None:
        assert self._view is not None
        unfinished = {"step": "cancelled"} if state == "cancelled" else {"step": "failed"}
        models = [m.model_copy(update=unfinished) if m.step in _UNFINISHED else m for m in self._view.models]
        self._update(state=state, error=error, finished_at=self._clock(), eta_s=None, models=models)

    async def _restore(
        self,
        document: BackupDocument,
        models: list[ModelDefinition],
        keys: Sequence[ApiKeyRecord] | None,
        actor: str,
    ) -> None:
        host = self._host
        imported = await import_models(host.registry, models)
        await host.models_changed()
        self._update(
            phase="keys",
            models_added=list(imported.added),
            models_changed=list(imported.changed),
            models_unchanged=list(imported.unchanged),
            models_refused=dict(imported.refused),
        )
        if keys:
            merged = await import_keys(host.keys, keys)
            self._update(keys_added=list(merged.added), keys_conflicting=list(merged.conflicts))
        self._update(phase="host-services")
        services = await import_host_services(host.host_services, backup_host_services(document))
        restored = [model for model in models if model.id in imported.imported]
        self._update(
            phase="downloads",
            host_services_changed=list(services.containers),
            models=[RestoreModelProgress(model_id=m.id, node_id=host.node_of(m)) for m in restored],
        )
        by_node: dict[str, list[ModelDefinition]] = {}
        for model in restored:
            by_node.setdefault(host.node_of(model), []).append(model)
        async with anyio.create_task_group() as nodes:
            for node_id, definitions in by_node.items():
                nodes.start_soon(self._node_lane, node_id, definitions, actor)

    async def _node_lane(self, node_id: str, definitions: list[ModelDefinition], actor: str) -> None:
        # One model after the other on a node: downloads in turn, and one start at a time.
        paths = list(dict.fromkeys(path for d in definitions for path in checked_folders(d)))
        try:
            present = await self._host.folders_present(node_id, paths)
        except MirbadError as exc:
            # Not known: no download is guessed at; a start then says what is missing.
            _logger.warning("node %s did not say which folders it has: %s", node_id, exc)
            present = None
        for definition in definitions:
            await self._restore_model(node_id, definition, present, actor)

    async def _restore_model(
        self, node_id: str, definition: ModelDefinition, present: Mapping[str, bool] | None, actor: str
    ) -> None:
        model_id = definition.id
        if present is not None:
            plan = folder_plan(definition, present)
            self._progress(model_id, missing_folders=[source.folder for source in plan.downloads])
            if plan.manual:
                message = f"{definition.model_path!r} is not on node {node_id!r} and no source can bring it"
                self._progress(model_id, step="manual", message=message)
                return
            for source in plan.downloads:
                if not await self._download(node_id, model_id, source, actor):
                    return
        if not definition.auto_start:
            self._progress(model_id, step="present", folder=None)
            return
        self._update(phase="starts")
        await self._start(model_id, actor)

    async def _download(self, node_id: str, model_id: str, source: ModelSource, actor: str) -> bool:
        self._progress(model_id, step="downloading", folder=source.folder, done_bytes=0, total_bytes=0)
        try:
            job = await self._host.start_download(node_id, download_request(source), actor)
        except MirbadError as exc:
            self._progress(model_id, step="failed", message=f"download of {source.folder!r}: {exc}")
            return False
        self._progress(model_id, download_id=job.id)
        try:
            with anyio.fail_after(self._timings.download_timeout_s):
                while job.state not in _FINISHED and job.state not in _STOPPED:
                    await anyio.sleep(self._timings.poll_s)
                    job = await self._host.download(node_id, job.id)
                    self._progress(model_id, done_bytes=job.done_bytes, total_bytes=job.total_bytes)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True), anyio.move_on_after(_CANCEL_TIMEOUT_S):
                await self._cancel_download(node_id, job.id, actor)
            raise
        except (MirbadError, TimeoutError) as exc:
            self._progress(model_id, step="failed", message=f"download of {source.folder!r}: {exc}")
            return False
        if job.state in _STOPPED:
            reason = job.error or job.state
            self._progress(model_id, step="failed", message=f"download of {source.folder!r}: {reason}")
            return False
        return True

    async def _cancel_download(self, node_id: str, download_id: str, actor: str) -> None:
        try:
            await self._host.cancel_download(node_id, download_id, actor)
        except MirbadError as exc:
            _logger.warning("could not cancel download %s on node %s: %s", download_id, node_id, exc)

    async def _start(self, model_id: str, actor: str) -> None:
        self._progress(model_id, step="starting", folder=None)
        timings = self._timings
        for attempt in range(timings.start_retries + 1):
            try:
                await self._host.start_model(model_id, actor)
            except (AgentStartConflictError, StartLaneBusyError) as exc:
                if attempt == timings.start_retries:
                    self._progress(model_id, step="failed", message=str(exc))
                    return
                await anyio.sleep(timings.start_retry_s)
                continue
            except AgentAdmissionRefusedError as exc:
                self._progress(model_id, step="left-stopped", message=str(exc))
                return
            except MirbadError as exc:
                self._progress(model_id, step="failed", message=str(exc))
                return
            self._progress(model_id, step="started", message=None)
            return
