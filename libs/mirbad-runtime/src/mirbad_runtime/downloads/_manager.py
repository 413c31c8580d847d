"""Download jobs on a node: started by request, run a bounded number at a time, resumed after a restart.

Each job writes into ``{root}/.mirbad-download-{id}`` beside its target ``{root}/{folder}``; only when
every file is verified is that folder renamed into place, so a model is never read from a half folder.
A job's record (``{state_dir}/{id}.json``) is replaced atomically on every change of state, and the
token it was given, if any, sits owner-only in ``{id}.token`` until the job ends. Progress itself is
not persisted: the bytes on disk are the truth a resumed job starts from.

A job that stops (failed, cancelled) keeps its verified files so that :meth:`DownloadManager.retry`, or
a new job for the same source and folder (which adopts them), goes on from there; removing the job
deletes them, and a temporary folder no job owns is deleted when the manager starts. A source that
fails mid-job is retried with back-off for a bounded window. Disk space is reserved (:mod:`._space`).
A record that cannot be written (a full disk) is logged and the job's state still changes in memory,
so a job always ends.
"""

from __future__ import annotations

import contextlib
import errno
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

from mirbad_protocol.downloads import (
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
    SourceStalledError,
    SourceUnavailableError,
    StateWriteError,
)

from ._failures import unexpected_failure
from ._network import NetworkLimits
from ._records import JobRecord, JobRecords
from ._sources import DownloadPlan, PlannedFile, plan_huggingface, plan_ollama
from ._space import (
    CHECK_EVERY_BYTES,
    DEFAULT_SPACE_MARGIN_BYTES,
    FreeSpaceProbe,
    SpaceGuard,
    disk_free_bytes,
    file_system_of,
)
from ._transfer import fetch_file, on_disk_bytes

__all__ = [
    "DEFAULT_HF_ENDPOINT",
    "DEFAULT_OLLAMA_REGISTRY",
    "DEFAULT_RETRY_WINDOW_S",
    "TEMP_PREFIX",
    "DownloadManager",
]

logger = logging.getLogger(__name__)

DEFAULT_HF_ENDPOINT: Final = "https://huggingface.co"
"""The Hugging Face hub downloads use unless a mirror is configured."""
DEFAULT_OLLAMA_REGISTRY: Final = "https://registry.ollama.ai"
"""The Ollama registry downloads use unless another is configured."""
TEMP_PREFIX: Final = ".mirbad-download-"
"""The prefix of a job's temporary folder beside its target (a dot folder listings still show)."""
_ACTIVE: Final = frozenset({"queued", "running", "verifying"})
_RETRYABLE: Final = frozenset({"failed", "cancelled"})
DEFAULT_RETRY_WINDOW_S: Final = 600.0
"""How long a job retries a failing source before it fails (the window restarts when bytes arrive)."""
_FIRST_PAUSE_S: Final = 0.5
_LONGEST_PAUSE_S: Final = 30.0
_UNWIND_S: Final = 30.0
# Blocking file work (records, free space, hashing a partial) runs on the manager's own threads, so no
# number of downloads can take the worker threads the rest of the agent needs.
_THREADS: Final = 4


def _ended_event() -> anyio.Event:
    event = anyio.Event()
    event.set()  # a job loaded stopped, or made and not yet launched, has no task to wait for
    return event


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
    checked_at_bytes: int = 0
    task_ended: anyio.Event = field(default_factory=_ended_event)

    def remaining_bytes(self) -> int:
        """What the job still has to write (its reservation of disk space)."""
        done = sum(self.done.get(item.path, item.done_bytes) for item in self.view.files)
        return max(0, self.view.total_bytes - done)


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
        space_margin_bytes: the free space downloads always leave on a root's file system.
        retry_window_s: how long a job retries a failing source (with back-off) before it fails.
        retry_pause_s: the first pause between retries; each next one doubles, up to 30 s.
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
        space_margin_bytes: int = DEFAULT_SPACE_MARGIN_BYTES,
        retry_window_s: float = DEFAULT_RETRY_WINDOW_S,
        retry_pause_s: float = _FIRST_PAUSE_S,
        limits: NetworkLimits | None = None,
    ) -> None:
        self.roots = tuple(roots)
        self.state_dir = state_dir
        self._records = JobRecords(state_dir)
        self.hf_endpoint = hf_endpoint.rstrip("/")
        self.ollama_registry = ollama_registry.rstrip("/")
        self._limiter = anyio.CapacityLimiter(max_concurrent)
        self._space = SpaceGuard(free_space, space_margin_bytes)
        self._retry_window_s = retry_window_s
        self._retry_pause_s = retry_pause_s
        self.limits = limits or NetworkLimits()
        self._threads = anyio.CapacityLimiter(_THREADS)
        self._planning = anyio.CapacityLimiter(self.limits.max_planning)
        self._plans: set[anyio.CancelScope] = set()
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
            await anyio.to_thread.run_sync(self._sweep_orphans, limiter=self._threads)
            async with anyio.create_task_group() as group:
                self._group = group
                for job in self._jobs.values():
                    if job.view.state in _ACTIVE:
                        self._launch(job)
                task_status.started()
                try:
                    await anyio.sleep_forever()
                finally:
                    self._group = None
                    for scope in tuple(self._plans):
                        scope.cancel()  # a start still resolving its source ends with the manager

    async def start(self, request: HuggingFaceDownload | OllamaDownload) -> DownloadJob:
        """Check ``request``, resolve its files, check free space, and queue the job.

        A stopped (failed or cancelled) job for the same source, revision and folder hands its verified
        files over: the new job adopts its temporary folder and the old job is forgotten.

        Raises:
            DownloadRefusedError: no such model root.
            DownloadConflictError: the target folder exists or another job writes it.
            SourceNotFoundError, SourceNeedsTokenError, SourceUnavailableError: from the source.
            InsufficientSpaceError: the root cannot hold the files beside the other jobs' reservations and
                the margin.
        """
        if self._group is None:
            raise DownloadConflictError("the download manager is not running")
        root = self._root(request.root)
        self._check_target(root, request.folder)
        token = _token_of(request)
        plan = await self._plan(request, token)
        async with self._lock:
            self._check_target(root, request.folder)
            job = self._new_job(request, plan)
            adopted = self._adoptable(job)
            await self._check_room(job, partial=adopted)
            try:
                if token is not None:
                    await anyio.to_thread.run_sync(
                        self._records.save_token, job.view.id, token, limiter=self._threads
                    )
                await self._persist(job)
            except OSError as exc:
                # No record, no job (an agent could not resume it after a restart); the files of a job it
                # would have adopted stay with that job.
                await anyio.to_thread.run_sync(self._forget_record, job, limiter=self._threads)
                raise StateWriteError(
                    self.state_dir,
                    f"the download's record could not be written: {exc.strerror or exc}",
                    disk_full=exc.errno in (errno.ENOSPC, errno.EDQUOT),
                ) from None
            if adopted is not None:
                with anyio.fail_after(_UNWIND_S):
                    await adopted.task_ended.wait()  # its cancelled transfer no longer writes
                await anyio.to_thread.run_sync(self._adopt, adopted, job, limiter=self._threads)
            self._jobs[job.view.id] = job
        self._launch(job)
        return self.get(job.view.id)

    async def plan(self, request: HuggingFaceDownload | OllamaDownload) -> DownloadPlan:
        """What ``request`` would fetch, as its source lists the files now; nothing is started or written.

        The same listing a start makes (the request's token used, never kept), under the same deadline
        and planning slots, so asking a size holds no more of a silent source than a start does.

        Raises:
            DownloadConflictError: the manager is not running.
            SourceNotFoundError, SourceNeedsTokenError, SourceUnavailableError: from the source (a
                source that does not answer within the planning deadline is unavailable).
        """
        if self._group is None:
            raise DownloadConflictError("the download manager is not running")
        return await self._plan(request, _token_of(request))

    async def retry(self, download_id: str) -> DownloadJob:
        """Run a failed or cancelled job again; it resumes from the verified bytes on disk.

        Raises:
            DownloadNotFoundError: no such job.
            DownloadConflictError: the job is not failed or cancelled, or its folder now exists or another
                job writes it.
            InsufficientSpaceError: the root cannot hold what the job still needs.
        """
        if self._group is None:
            raise DownloadConflictError("the download manager is not running")
        job = self._job(download_id)
        # A cancelled transfer may still be unwinding (a thread finishing a write): never two writers.
        with anyio.fail_after(_UNWIND_S):
            await job.task_ended.wait()
        async with self._lock:
            if job.view.state not in _RETRYABLE:
                raise DownloadConflictError(
                    f"download {download_id} is {job.view.state}: only a failed or cancelled job is retried",
                    field="state",
                )
            root = self.roots[job.view.root]
            self._check_target(root, job.view.folder, ignore=job)
            await self._check_room(job, partial=job)
            job.cancel_requested = False
            job.scope = anyio.CancelScope()
            job.done.clear()
            job.checked_at_bytes = 0
            await self._set_state(job, "queued")
        self._launch(job)
        return self.get(download_id)

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
            raise DownloadConflictError(
                f"download {download_id} is {job.view.state}, not running", field="state"
            )
        if job.view.state == "verifying":
            # Every byte is in and the folder is being put in place: a cancel could only half-undo it.
            raise DownloadConflictError(
                f"download {download_id} is already putting its folder in place", field="state"
            )
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
            raise DownloadConflictError(
                f"download {download_id} is {job.view.state}: cancel it first", field="state"
            )
        # Nothing is written first: on a full disk, removing is what frees it.
        async with self._lock:
            self._jobs.pop(download_id, None)
            await anyio.to_thread.run_sync(self._delete_files, job, limiter=self._threads)

    # ------------------------------------------------------------ the job itself

    def _launch(self, job: _Job) -> None:
        if self._group is None:
            raise DownloadConflictError("the download manager is not running")
        job.task_ended = anyio.Event()
        self._group.start_soon(self._run_job, job)

    async def _run_job(self, job: _Job) -> None:
        try:
            await self._run_job_body(job)
        finally:
            job.task_ended.set()

    async def _run_job_body(self, job: _Job) -> None:
        with job.scope:
            try:
                async with self._limiter:
                    await self._transfer(job)
            except DownloadError as exc:
                logger.warning("download %s failed: %s", job.view.id, exc)
                await self._fail(job, str(exc))
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                    logger.exception("download %s failed", job.view.id)
                    await self._fail(job, unexpected_failure(exc, self.roots))
                    return
                logger.warning("download %s: the disk is full: %s", job.view.id, exc)
                await self._fail(job, f"insufficient space: the disk of model root {job.view.root} is full")
            except Exception as exc:
                logger.exception("download %s failed", job.view.id)
                await self._fail(job, unexpected_failure(exc, self.roots))

    async def _fail(self, job: _Job, error: str) -> None:
        await self._set_state(job, "failed", error=error)
        # A retry resumes from the verified bytes; a temporary folder with none of them is not kept.
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self._drop_empty_temp, job, limiter=self._threads)

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
        # A dropped connection or a hub outage: back off and resume (Range) from what reached the disk,
        # for as long as the window lasts; bytes arriving start the window again.
        deadline = time.monotonic() + self._retry_window_s
        pause, progress_at = self._retry_pause_s, job.done.get(item.path, 0)
        while True:
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
            except SourceStalledError:
                raise  # a drip-fed source would hold the job's slot for the whole window: it fails now
            except SourceUnavailableError as exc:
                now = time.monotonic()
                if job.done.get(item.path, 0) > progress_at:
                    deadline, pause = now + self._retry_window_s, self._retry_pause_s
                    progress_at = job.done.get(item.path, 0)
                if now + pause > deadline:
                    raise SourceUnavailableError(
                        f"{exc} (retried for {self._retry_window_s:.0f} s, the retry window)"
                    ) from None
                logger.warning("download %s: %s; retrying in %.1f s", job.view.id, exc, pause)
                await anyio.sleep(pause)
                pause = min(pause * 2, _LONGEST_PAUSE_S)

    def _progress(self, job: _Job, item: PlannedFile) -> Callable[[int], None]:
        def update(written: int) -> None:
            job.done[item.path] = written
            total = sum(job.done.values())
            if total - job.checked_at_bytes >= CHECK_EVERY_BYTES:
                # A statvfs between chunks: cheap, and it stops the transfer before the disk fills.
                job.checked_at_bytes = total
                self._check_space(job, job.remaining_bytes())

        return update

    def _place(self, job: _Job) -> None:
        temp, target = self._temp(job), self._target(job)
        for item in job.plan.files:
            path = temp / item.path
            if not path.is_file() or path.stat().st_size != item.size:
                raise DownloadVerificationError(item.path, "missing or changed before the folder was placed")
        if target.exists():
            raise DownloadConflictError(
                f"{job.view.folder} appeared in model root {job.view.root} while downloading; the files stay "
                f"in {temp.name} (retry once it is gone)",
                field="folder",
            )
        temp.rename(target)
        self._records.forget_token(job.view.id)

    # ------------------------------------------------------------ records and paths

    def _root(self, index: int) -> Path:
        if not 0 <= index < len(self.roots):
            raise DownloadRefusedError("root", f"this node has no model root {index}")
        return self.roots[index]

    def _check_target(self, root: Path, folder: str, *, ignore: _Job | None = None) -> None:
        target = root / folder
        if target.parent != root or target.name != folder:
            raise DownloadRefusedError("folder", "must be one folder name directly under the model root")
        index = self.roots.index(root)
        # The messages name the root by index: the node's absolute paths are not the caller's business.
        if target.exists():
            raise DownloadConflictError(f"{folder} already exists in model root {index}", field="folder")
        for job in self._jobs.values():
            if job is not ignore and job.view.state in _ACTIVE and self._target(job) == target:
                raise DownloadConflictError(
                    f"download {job.view.id} is writing {folder} in model root {index}", field="folder"
                )

    def _check_space(self, job: _Job, needed: int, reserved: list[int] | None = None) -> None:
        root = self.roots[job.view.root]
        reserved = self._reserved(job) if reserved is None else reserved
        self._space.check(root, needed, reserved, label=f"model root {job.view.root}")

    async def _check_room(self, job: _Job, *, partial: _Job | None) -> None:
        """Check that ``job`` fits, less the verified bytes ``partial`` (adopted or resumed) holds on disk."""
        on_disk = 0
        if partial is not None:
            on_disk = await anyio.to_thread.run_sync(self._bytes_in, partial, limiter=self._threads)
        needed = max(0, job.view.total_bytes - on_disk)
        # The reservations are summed here, in the event loop that changes the jobs; only the probe blocks.
        reserved = self._reserved(job)
        await anyio.to_thread.run_sync(self._check_space, job, needed, reserved, limiter=self._threads)

    def _reserved(self, job: _Job) -> list[int]:
        """The remaining bytes of the other unfinished jobs on ``job``'s root's file system."""
        device = file_system_of(self.roots[job.view.root])
        return [
            other.remaining_bytes()
            for other in self._jobs.values()
            if other is not job
            and other.view.state in _ACTIVE
            and file_system_of(self.roots[other.view.root]) == device
        ]

    def _adoptable(self, job: _Job) -> _Job | None:
        """A stopped job of the same source, revision, root and folder whose files ``job`` can take."""
        for other in self._jobs.values():
            if (
                other.view.state in _RETRYABLE
                and (other.view.kind, other.view.source, other.view.revision)
                == (job.view.kind, job.view.source, job.view.revision)
                and (other.view.root, other.view.folder) == (job.view.root, job.view.folder)
                and other.plan.files == job.plan.files
            ):
                return other
        return None

    def _bytes_in(self, job: _Job) -> int:
        temp = self._temp(job)
        return sum(on_disk_bytes(temp / item.path) for item in job.plan.files)

    def _adopt(self, old: _Job, new: _Job) -> None:
        source = self._temp(old)
        if source.is_dir():
            source.rename(self._temp(new))
        self._records.delete(old.view.id)
        self._jobs.pop(old.view.id, None)
        logger.info("download %s adopts the files of %s", new.view.id, old.view.id)

    def _drop_empty_temp(self, job: _Job) -> None:
        temp = self._temp(job)
        if temp.is_dir() and self._bytes_in(job) == 0:
            shutil.rmtree(temp, ignore_errors=True)

    def _sweep_orphans(self) -> None:
        """Delete the temporary folders no job owns (a job removed while its agent was killed)."""
        owned = {self._temp(job) for job in self._jobs.values()}
        for root in self.roots:
            with contextlib.suppress(OSError):
                for path in root.glob(f"{TEMP_PREFIX}*"):
                    if path not in owned and path.is_dir():
                        logger.info("removing %s: no download job owns it", path)
                        shutil.rmtree(path, ignore_errors=True)

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
            files=[
                DownloadFile(path=f.path, size_bytes=f.size, sha256=f.sha256, git_sha1=f.git_sha1)
                for f in plan.files
            ],
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
            try:
                await self._persist(job, view)
            except OSError as exc:
                # A full disk must not leave the job "running" for ever: the state changes in memory, and
                # the next change (or the agent's next start) writes the record again.
                logger.warning("download %s: its record could not be written: %s", job.view.id, exc)
        job.view = view

    async def _persist(self, job: _Job, view: DownloadJob | None = None) -> None:
        record = JobRecord(view or job.view, job.request, job.plan)
        await anyio.to_thread.run_sync(self._records.write, record, limiter=self._threads)

    def _forget_record(self, job: _Job) -> None:
        try:
            self._records.delete(job.view.id)
        except OSError as exc:
            logger.warning("download %s: its record could not be deleted: %s", job.view.id, exc)

    def _delete_files(self, job: _Job) -> None:
        # The files first, and nothing written: on a full disk this is what frees it.
        shutil.rmtree(self._temp(job), ignore_errors=True)
        # The job is forgotten all the same; a record left behind loads as a stopped job without files.
        self._forget_record(job)

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
