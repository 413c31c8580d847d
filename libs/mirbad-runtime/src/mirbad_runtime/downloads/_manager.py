"""Download jobs on a node: started by request, run a bounded number at a time, resumed after a restart.

Each job writes into ``{root}/.mirbad-download-{id}`` beside its target ``{root}/{folder}``; only when
every file is verified is that folder renamed into place, so a model is never read from a half folder.
A job's record (``{state_dir}/{id}.json``) is replaced atomically on every change of state, and the
token it was given, if any, sits owner-only in ``{id}.token`` until the job ends. Progress itself is
not persisted: the bytes on disk are the truth a resumed job starts from.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import anyio
import anyio.to_thread
import httpx
from anyio.abc import TaskGroup, TaskStatus

from mirbad_protocol import (
    DownloadFile,
    DownloadJob,
    DownloadState,
    HuggingFaceDownload,
    OllamaDownload,
)
from mirbad_runtime.exceptions import (
    DownloadConflictError,
    DownloadError,
    DownloadNotFoundError,
    DownloadRefusedError,
    DownloadVerificationError,
    InsufficientSpaceError,
    SourceUnavailableError,
)

from ._network import NetworkLimits
from ._records import JobRecord, JobRecords
from ._sources import DownloadPlan, PlannedFile, plan_huggingface, plan_ollama
from ._transfer import fetch_file, on_disk_bytes

__all__ = [
    "DEFAULT_HF_ENDPOINT",
    "DEFAULT_OLLAMA_REGISTRY",
    "TEMP_PREFIX",
    "DownloadManager",
    "FreeSpaceProbe",
    "disk_free_bytes",
]

logger = logging.getLogger(__name__)

DEFAULT_HF_ENDPOINT: Final = "https://huggingface.co"
"""The Hugging Face hub downloads use unless a mirror is configured."""
DEFAULT_OLLAMA_REGISTRY: Final = "https://registry.ollama.ai"
"""The Ollama registry downloads use unless another is configured."""
TEMP_PREFIX: Final = ".mirbad-download-"
"""The prefix of a job's temporary folder beside its target (a dot folder listings still show)."""
_ACTIVE: Final = frozenset({"queued", "running", "verifying"})
_ATTEMPTS: Final = 4
_RETRY_PAUSE_S: Final = 0.5
# Blocking file work (records, free space, hashing a partial) runs on the manager's own threads, so no
# number of downloads can take the worker threads the rest of the agent needs.
_THREADS: Final = 4

FreeSpaceProbe = Callable[[Path], int]
"""The free bytes of the file system holding a folder (blocking; a seam for tests)."""


def disk_free_bytes(path: Path) -> int:
    """The free bytes of the file system that holds ``path`` (:func:`shutil.disk_usage`)."""
    return shutil.disk_usage(path).free


@dataclass
class _Job:
    view: DownloadJob
    request: dict[str, Any]
    plan: DownloadPlan
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    cancel_requested: bool = False
    started_at: float | None = None
    started_bytes: int = 0
    done: dict[str, int] = field(default_factory=dict)


class DownloadManager:
    """The node's download jobs (start them with :meth:`start` once :meth:`run` is running).

    Args:
        roots: the model roots a request's ``root`` indexes.
        state_dir: where job records and tokens are kept (created owner-only).
        hf_endpoint: the Hugging Face hub or mirror.
        ollama_registry: the Ollama registry.
        max_concurrent: how many jobs transfer at once; the rest wait queued.
        free_space: the free-space probe (:func:`disk_free_bytes` unless a test gives its own).
        http: the client for file transfers and manifests (created and closed by :meth:`run` when None).
        limits: the network bounds of planning and transfers (timeouts, caps, the rate floor).
    """

    def __init__(
        self,
        roots: Sequence[Path],
        state_dir: Path,
        *,
        hf_endpoint: str = DEFAULT_HF_ENDPOINT,
        ollama_registry: str = DEFAULT_OLLAMA_REGISTRY,
        max_concurrent: int = 2,
        free_space: FreeSpaceProbe = disk_free_bytes,
        http: httpx.AsyncClient | None = None,
        limits: NetworkLimits | None = None,
    ) -> None:
        self.roots = tuple(roots)
        self.state_dir = state_dir
        self._records = JobRecords(state_dir)
        self.hf_endpoint = hf_endpoint.rstrip("/")
        self.ollama_registry = ollama_registry.rstrip("/")
        self._limiter = anyio.CapacityLimiter(max_concurrent)
        self.limits = limits or NetworkLimits()
        self._threads = anyio.CapacityLimiter(_THREADS)
        self._planning = anyio.CapacityLimiter(self.limits.max_planning)
        self._plans: set[anyio.CancelScope] = set()
        self._free_space = free_space
        self._http = http
        self._jobs: dict[str, _Job] = {}
        self._group: TaskGroup | None = None
        self._lock = anyio.Lock()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Load the recorded jobs, resume the unfinished ones, and run jobs until cancelled.

        Cancelling it stops the transfers without marking them stopped, so the next run resumes them.
        """
        async with contextlib.AsyncExitStack() as stack:
            if self._http is None:
                self._http = await stack.enter_async_context(
                    httpx.AsyncClient(timeout=self.limits.timeout(), trust_env=False)
                )
            for record in await anyio.to_thread.run_sync(
                self._records.load, len(self.roots), limiter=self._threads
            ):
                self._jobs[record.view.id] = _Job(view=record.view, request=record.request, plan=record.plan)
            async with anyio.create_task_group() as group:
                self._group = group
                for job in self._jobs.values():
                    if job.view.state in _ACTIVE:
                        group.start_soon(self._run_job, job)
                task_status.started()
                try:
                    await anyio.sleep_forever()
                finally:
                    self._group = None
                    for scope in tuple(self._plans):
                        scope.cancel()  # a start still resolving its source ends with the manager

    async def start(self, request: HuggingFaceDownload | OllamaDownload) -> DownloadJob:
        """Check ``request``, resolve its files, check free space, and queue the job.

        Raises:
            DownloadRefusedError: no such model root.
            DownloadConflictError: the target folder exists or another job writes it.
            SourceNotFoundError, SourceNeedsTokenError, SourceUnavailableError: from the source.
            InsufficientSpaceError: the root has less free space than the files need.
        """
        if self._group is None:
            raise DownloadConflictError("the download manager is not running")
        root = self._root(request.root)
        self._check_target(root, request.folder)
        token = _token_of(request)
        plan = await self._plan(request, token)
        needed = sum(item.size for item in plan.files)
        free = await anyio.to_thread.run_sync(self._free_space, root, limiter=self._threads)
        if needed > free:
            raise InsufficientSpaceError(root, needed, free)
        async with self._lock:
            self._check_target(root, request.folder)
            job = self._new_job(request, plan)
            if token is not None:
                await anyio.to_thread.run_sync(
                    self._records.save_token, job.view.id, token, limiter=self._threads
                )
            await self._persist(job)
            self._jobs[job.view.id] = job
        self._group.start_soon(self._run_job, job)
        return self.get(job.view.id)

    def jobs(self) -> list[DownloadJob]:
        """Every job, newest first."""
        views = [self.get(job_id) for job_id in self._jobs]
        return sorted(views, key=lambda view: view.created_at, reverse=True)

    def get(self, download_id: str) -> DownloadJob:
        """The job with its current progress.

        Raises:
            DownloadNotFoundError: no such job.
        """
        job = self._job(download_id)
        files = [replace_file(item, job.done.get(item.path, item.done_bytes)) for item in job.view.files]
        done = sum(item.done_bytes for item in files)
        rate = eta = None
        if job.view.state == "running" and job.started_at is not None:
            elapsed = time.monotonic() - job.started_at
            if elapsed > 0:
                rate = (done - job.started_bytes) / elapsed
                eta = (job.view.total_bytes - done) / rate if rate > 0 else None
        return job.view.model_copy(
            update={"files": files, "done_bytes": done, "bytes_per_second": rate, "eta_seconds": eta}
        )

    async def cancel(self, download_id: str) -> DownloadJob:
        """Stop a queued or running job; its partial files stay until :meth:`remove`.

        Raises:
            DownloadNotFoundError: no such job.
            DownloadConflictError: the job has already ended, or is putting its folder in place.
        """
        job = self._job(download_id)
        if job.view.state not in _ACTIVE:
            raise DownloadConflictError(f"download {download_id} is {job.view.state}, not running")
        if job.view.state == "verifying":
            # Every byte is in and the folder is being put in place: a cancel could only half-undo it.
            raise DownloadConflictError(f"download {download_id} is already putting its folder in place")
        job.cancel_requested = True
        job.scope.cancel()
        await self._set_state(job, "cancelled")
        return self.get(download_id)

    async def remove(self, download_id: str) -> None:
        """Forget a stopped job and delete its partial files (a completed job's folder stays).

        Raises:
            DownloadNotFoundError: no such job.
            DownloadConflictError: the job is still queued or running (cancel it first).
        """
        job = self._job(download_id)
        if job.view.state in _ACTIVE:
            raise DownloadConflictError(f"download {download_id} is {job.view.state}: cancel it first")
        async with self._lock:
            self._jobs.pop(download_id, None)
            await anyio.to_thread.run_sync(self._delete_files, job, limiter=self._threads)

    # ------------------------------------------------------------ the job itself

    async def _run_job(self, job: _Job) -> None:
        with job.scope:
            try:
                async with self._limiter:
                    await self._transfer(job)
            except DownloadError as exc:
                logger.warning("download %s failed: %s", job.view.id, exc)
                await self._set_state(job, "failed", error=str(exc))
            except Exception as exc:
                logger.exception("download %s failed", job.view.id)
                await self._set_state(job, "failed", error=f"unexpected failure: {exc}")

    async def _transfer(self, job: _Job) -> None:
        temp = self._temp(job)
        await anyio.to_thread.run_sync(lambda: temp.mkdir(parents=True, exist_ok=True), limiter=self._threads)
        for item in job.plan.files:
            job.done[item.path] = await anyio.to_thread.run_sync(
                on_disk_bytes, temp / item.path, limiter=self._threads
            )
        job.started_at, job.started_bytes = time.monotonic(), sum(job.done.values())
        await self._set_state(job, "running")
        headers = await anyio.to_thread.run_sync(
            self._records.auth_headers, job.view.id, limiter=self._threads
        )
        for item in job.plan.files:
            await self._fetch_with_retries(job, item, temp / item.path, headers)
        await self._set_state(job, "verifying")
        await anyio.to_thread.run_sync(self._place, job, limiter=self._threads)
        await self._set_state(job, "completed")

    async def _fetch_with_retries(
        self, job: _Job, item: PlannedFile, target: Path, headers: dict[str, str]
    ) -> None:
        for attempt in range(1, _ATTEMPTS + 1):
            try:
                await fetch_file(
                    self._http_client,
                    item,
                    target,
                    headers=headers,
                    progress=self._progress(job, item),
                    limits=self.limits,
                    threads=self._threads,
                )
                return
            except SourceUnavailableError as exc:
                # A dropped connection or a hub hiccup: resume (Range) from what reached the disk.
                if attempt == _ATTEMPTS:
                    raise
                logger.warning("download %s: %s; retry %d of %d", job.view.id, exc, attempt, _ATTEMPTS - 1)
                await anyio.sleep(_RETRY_PAUSE_S * attempt)

    def _progress(self, job: _Job, item: PlannedFile) -> Callable[[int], None]:
        def update(written: int) -> None:
            job.done[item.path] = written

        return update

    def _place(self, job: _Job) -> None:
        temp, target = self._temp(job), self._target(job)
        for item in job.plan.files:
            path = temp / item.path
            if not path.is_file() or path.stat().st_size != item.size:
                raise DownloadVerificationError(item.path, "missing or changed before the folder was placed")
        if target.exists():
            raise DownloadConflictError(f"{target} appeared while downloading; the files stay in {temp}")
        temp.rename(target)
        self._records.forget_token(job.view.id)

    # ------------------------------------------------------------ records and paths

    def _root(self, index: int) -> Path:
        if not 0 <= index < len(self.roots):
            raise DownloadRefusedError("root", f"this node has no model root {index}")
        return self.roots[index]

    def _check_target(self, root: Path, folder: str) -> None:
        target = root / folder
        if target.parent != root or target.name != folder:
            raise DownloadRefusedError("folder", "must be one folder name directly under the model root")
        if target.exists():
            raise DownloadConflictError(f"folder: {target} already exists")
        for job in self._jobs.values():
            if job.view.state in _ACTIVE and self._target(job) == target:
                raise DownloadConflictError(f"folder: download {job.view.id} is writing {target}")

    def _target(self, job: _Job) -> Path:
        return self.roots[job.view.root] / job.view.folder

    def _temp(self, job: _Job) -> Path:
        return self.roots[job.view.root] / f"{TEMP_PREFIX}{job.view.id}"

    async def _plan(self, request: HuggingFaceDownload | OllamaDownload, token: str | None) -> DownloadPlan:
        # On the event loop, a bounded number at a time, within one deadline (the wait for a slot
        # included), and cancelled with the manager: a hub that never answers holds nothing for long.
        source = "hub" if isinstance(request, HuggingFaceDownload) else "registry"
        deadline = self.limits.plan_timeout_s
        with anyio.CancelScope() as scope:
            self._plans.add(scope)
            try:
                with anyio.fail_after(deadline):
                    async with self._planning:
                        return await self._resolve(request, token)
            except TimeoutError:
                raise SourceUnavailableError(
                    f"the {source} did not answer {request.source} within {deadline:g} s"
                ) from None
            finally:
                self._plans.discard(scope)
        raise DownloadConflictError("the download manager stopped while resolving the source")

    async def _resolve(
        self, request: HuggingFaceDownload | OllamaDownload, token: str | None
    ) -> DownloadPlan:
        if isinstance(request, HuggingFaceDownload):
            return await plan_huggingface(request, self.hf_endpoint, token, self.limits)
        return await plan_ollama(request, self.ollama_registry, self._http_client, self.limits)

    @property
    def _http_client(self) -> httpx.AsyncClient:
        if self._http is None:
            raise DownloadConflictError("the download manager is not running")
        return self._http

    def _new_job(self, request: HuggingFaceDownload | OllamaDownload, plan: DownloadPlan) -> _Job:
        now = datetime.now(UTC)
        view = DownloadJob(
            id="dl-" + secrets.token_hex(6),
            kind=request.kind,
            source=request.source,
            revision=plan.revision,
            root=request.root,
            folder=request.folder,
            files=[DownloadFile(path=f.path, size_bytes=f.size, sha256=f.sha256) for f in plan.files],
            total_bytes=sum(f.size for f in plan.files),
            created_at=now,
            updated_at=now,
        )
        kept = request.model_dump(mode="json", by_alias=True, exclude={"token"})
        return _Job(view=view, request=kept, plan=plan)

    async def _set_state(self, job: _Job, state: DownloadState, *, error: str | None = None) -> None:
        if job.cancel_requested and state != "cancelled":
            return  # a transfer unwinding after a cancel must not overwrite "cancelled"
        files = self.get(job.view.id).files if job.view.id in self._jobs else job.view.files
        view = job.view.model_copy(
            update={"state": state, "error": error, "files": files, "updated_at": datetime.now(UTC)}
        )
        with anyio.CancelScope(shield=True):
            # On disk first: a reader who sees the new state finds its record already written.
            await self._persist(job, view)
        job.view = view

    async def _persist(self, job: _Job, view: DownloadJob | None = None) -> None:
        record = JobRecord(view or job.view, job.request, job.plan)
        await anyio.to_thread.run_sync(self._records.write, record, limiter=self._threads)

    def _delete_files(self, job: _Job) -> None:
        shutil.rmtree(self._temp(job), ignore_errors=True)
        self._records.delete(job.view.id)

    def _job(self, download_id: str) -> _Job:
        try:
            return self._jobs[download_id]
        except KeyError:
            raise DownloadNotFoundError(download_id) from None


def replace_file(item: DownloadFile, done: int) -> DownloadFile:
    """``item`` with ``done`` bytes on disk."""
    return item.model_copy(update={"done_bytes": done}) if done != item.done_bytes else item


def _token_of(request: HuggingFaceDownload | OllamaDownload) -> str | None:
    return request.token if isinstance(request, HuggingFaceDownload) else None
