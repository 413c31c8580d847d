"""The node's vLLM images: listed from its Docker, and pulled as jobs whose progress the master polls.

A pull is Docker's streaming pull (``POST /images/create``) read on a worker thread: each progress
event updates the job's layer it names, and the layers' bytes add up to one fraction. docker-py's own
``pull`` waits on the stream with no timeout at all, so the request is sent here through docker-py's
HTTP session with a read timeout: a Docker that sends nothing for ``stall_timeout_s`` fails the pull,
and the whole pull is bounded by ``pull_timeout_s``. One pull per image reference runs at a time.
A cancel shuts the stream's socket down: dockerd sees its client go and stops the pull.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import socket
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

import anyio
from anyio.abc import TaskGroup, TaskStatus

from mirbad_protocol.releases import ImageInfo, ImagePull, ImagePullState, split_image_reference

from ._container_spec import MODEL_LABEL
from ._docker_gateway import DockerGateway
from ._pull_progress import PullProgress
from .exceptions import (
    ImagePullConflictError,
    ImagePullError,
    ImagePullNotFoundError,
    MirbadRuntimeError,
    RuntimeUnavailableError,
)

if TYPE_CHECKING:
    import requests
    import urllib3
    from docker import DockerClient
else:
    # An idle agent does not load docker-py's HTTP stack: see _lazy_modules.
    from ._lazy_modules import requests, urllib3

__all__ = ["NodeImages", "is_vllm_image"]

_KEEP_FINISHED: Final = 20
_CLOSE_TIMEOUT_S: Final = 5.0


def is_vllm_image(tags: list[str]) -> bool:
    """Whether an image is a vLLM image by its tags: one whose repository name contains ``vllm``."""
    return any("vllm" in tag.rsplit(":", 1)[0].casefold() for tag in tags)


class _PullJob:
    """One pull: its progress (written by the worker thread) and the stream to shut on cancel."""

    def __init__(self, image: str) -> None:
        self.id = "pull-" + secrets.token_hex(6)
        self.image = image
        self.started_at = datetime.now(UTC)
        self.finished_at: datetime | None = None
        self.state: ImagePullState = "running"
        self.error: str | None = None
        self.progress = PullProgress()
        self.scope = anyio.CancelScope()
        self.cancelled = False
        self._lock = threading.Lock()
        self._response: requests.Response | None = None

    def apply(self, event: Mapping[str, Any]) -> None:
        with self._lock:
            self.progress.apply(event)

    def attach(self, response: requests.Response) -> bool:
        """Keep the stream for a cancel; False (and the stream closed) when the job was cancelled first."""
        with self._lock:
            if not self.cancelled:
                self._response = response
                return True
        _shut(response)
        return False

    def shut_stream(self) -> None:
        with self._lock:
            response, self._response = self._response, None
        if response is not None:
            _shut(response)

    def finish(self, state: ImagePullState, error: str | None = None) -> None:
        if self.state == "running":
            self.state, self.error, self.finished_at = state, error, datetime.now(UTC)

    def view(self) -> ImagePull:
        with self._lock:
            layers, current, total = self.progress.layers(), self.progress.current, self.progress.total
            status = self.progress.status
        return ImagePull(
            id=self.id,
            image=self.image,
            state=self.state,
            started_at=self.started_at,
            finished_at=self.finished_at,
            layers=layers,
            current_bytes=current,
            total_bytes=total,
            status=status,
            error=self.error,
        )


class NodeImages:
    """The node's Docker images and the pull jobs; every docker-py call off the event loop, bounded.

    Run :meth:`run` in the agent's task group before starting pulls (the pulls run inside it).

    Args:
        base_url: the Docker endpoint; None reads ``DOCKER_HOST`` (else the local socket).
        timeout_s: the bound of a listing and docker-py's HTTP timeout.
        pull_timeout_s: the bound of a whole pull.
        stall_timeout_s: a pull fails when Docker sends no progress for this long.
        network: the agent's model network: only the model containers on it make an image *in use*, as
            only they are this agent's (another fleet on the same dockerd has its own network);
            ``None`` counts every model container.
    """

    def __init__(
        self,
        base_url: str | None = None,
        *,
        timeout_s: float = 30.0,
        pull_timeout_s: float = 1800.0,
        stall_timeout_s: float = 300.0,
        network: str | None = None,
    ) -> None:
        self._gateway = DockerGateway(base_url, timeout_s)
        self._network = network
        self._pull_timeout_s = pull_timeout_s
        self._stall_timeout_s = stall_timeout_s
        self._jobs: dict[str, _PullJob] = {}
        self._group: TaskGroup | None = None

    async def images(self) -> list[ImageInfo]:
        """The vLLM images (see :func:`is_vllm_image`) and any image a model container runs, newest first."""
        return await self._gateway.call("list images", lambda client: _list_images(client, self._network))

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Host the pulls until cancelled (a running pull is stopped with it)."""
        try:
            async with anyio.create_task_group() as group:
                self._group = group
                task_status.started()
                await anyio.sleep_forever()
        finally:
            self._group = None
            for job in self._jobs.values():
                job.shut_stream()

    async def start_pull(self, image: str) -> ImagePull:
        """Start pulling ``image``; the job at once, its progress by :meth:`pull`.

        Raises:
            ValueError: ``image`` is not an image reference.
            ImagePullConflictError: a pull of the same reference is running.
            RuntimeUnavailableError: the pulls are not hosted (:meth:`run` is not running).
        """
        repository, tag = split_image_reference(image)
        # By what Docker pulls: ``vllm/x`` and ``vllm/x:latest`` are one image.
        running = (split_image_reference(job.image) for job in self._jobs.values() if job.state == "running")
        if (repository, tag) in running:
            raise ImagePullConflictError(image)
        if self._group is None:
            raise _not_running()
        job = _PullJob(image)
        self._jobs[job.id] = job
        self._forget_old()
        self._group.start_soon(self._pull, job, repository, tag)
        return job.view()

    def pulls(self) -> list[ImagePull]:
        """Every pull kept (the running ones and the last finished ones), newest first."""
        return [job.view() for job in sorted(self._jobs.values(), key=lambda j: j.started_at, reverse=True)]

    def pull(self, pull_id: str) -> ImagePull:
        """One pull with its progress.

        Raises:
            ImagePullNotFoundError: no pull with that id.
        """
        return self._job(pull_id).view()

    async def cancel_pull(self, pull_id: str) -> ImagePull:
        """Stop a running pull (a finished one is left as it is); the job as it was left.

        Raises:
            ImagePullNotFoundError: no pull with that id.
        """
        job = self._job(pull_id)
        if job.state == "running":
            job.cancelled = True
            job.finish("cancelled", "cancelled by request")
            job.scope.cancel()
            job.shut_stream()
        return job.view()

    async def aclose(self) -> None:
        """Stop the pulls' streams and close the client's connection pool."""
        for job in self._jobs.values():
            job.shut_stream()
        with anyio.move_on_after(_CLOSE_TIMEOUT_S, shield=True):
            await self._gateway.aclose()

    async def _pull(self, job: _PullJob, repository: str, tag: str) -> None:
        with job.scope:
            try:
                await self._gateway.call(
                    f"pull {job.image}",
                    lambda client: _stream_pull(client, job, repository, tag, self._stall_timeout_s),
                    timeout_s=self._pull_timeout_s,
                )
            except MirbadRuntimeError as exc:
                job.finish("failed", str(exc))
            else:
                error = job.progress.error
                job.finish("failed" if error else "completed", error)
            finally:
                # The worker thread is abandoned on a cancel or a timeout: shutting its socket ends it.
                job.shut_stream()

    def _job(self, pull_id: str) -> _PullJob:
        job = self._jobs.get(pull_id)
        if job is None:
            raise ImagePullNotFoundError(pull_id)
        return job

    def _forget_old(self) -> None:
        finished = [job for job in self._jobs.values() if job.state != "running"]
        finished.sort(key=lambda job: job.started_at)
        for job in finished[: max(0, len(finished) - _KEEP_FINISHED)]:
            del self._jobs[job.id]


def _not_running() -> MirbadRuntimeError:
    return RuntimeUnavailableError("the agent is not hosting image pulls (it is starting or stopping)")


def _list_images(client: DockerClient, network: str | None) -> list[ImageInfo]:
    # The same filter as the container driver's listing of its own models (model_containers).
    filters: dict[str, str] = {"label": MODEL_LABEL}
    if network is not None:
        filters["network"] = network
    used = {c.get("ImageID") for c in client.api.containers(all=True, filters=filters)}
    images = []
    for entry in client.api.images():
        tags = [tag for tag in entry.get("RepoTags") or [] if tag != "<none>:<none>"]
        in_use = entry.get("Id") in used
        if not (is_vllm_image(tags) or in_use):
            continue
        created = entry.get("Created")
        images.append(
            ImageInfo(
                id=str(entry.get("Id", "")),
                tags=sorted(tags),
                size_bytes=int(entry.get("Size") or 0),
                created=datetime.fromtimestamp(created, UTC) if isinstance(created, int) else None,
                in_use=in_use,
            )
        )
    return sorted(images, key=lambda image: image.created or datetime.min.replace(tzinfo=UTC), reverse=True)


def _stream_pull(client: DockerClient, job: _PullJob, repository: str, tag: str, stall_s: float) -> None:
    api = client.api
    url = f"{api.base_url}/v{api.api_version}/images/create"
    try:
        response = api.post(url, params={"fromImage": repository, "tag": tag}, stream=True, timeout=stall_s)
    except requests.exceptions.Timeout:
        raise ImagePullError(job.image, f"Docker did not answer within {stall_s:g} s") from None
    if not job.attach(response):
        return
    if response.status_code >= 400:
        raise ImagePullError(job.image, _refusal(response))
    try:
        for line in response.iter_lines(chunk_size=4096):
            if line.strip():
                job.apply(json.loads(line))
    except (requests.exceptions.RequestException, ValueError) as exc:
        if job.cancelled:
            return
        if _read_timed_out(exc):
            raise ImagePullError(job.image, f"Docker sent no progress for {stall_s:g} s") from None
        raise ImagePullError(job.image, f"the progress stream broke: {exc}") from exc


def _read_timed_out(exc: BaseException) -> bool:
    # Mid-stream, requests wraps urllib3's read timeout in a ConnectionError instead of a Timeout.
    if isinstance(exc, requests.exceptions.Timeout):
        return True
    return any(isinstance(arg, urllib3.exceptions.ReadTimeoutError) for arg in exc.args)


def _refusal(response: requests.Response) -> str:
    try:
        return str(response.json().get("message") or response.reason)
    except ValueError:
        return response.text.strip()[:300] or str(response.reason)


def _shut(response: requests.Response) -> None:
    # Closing a socket does not wake a thread blocked reading it; shutting it down does, and tells
    # dockerd its client is gone (it then stops the pull). urllib3 keeps the connection privately.
    connection = getattr(response.raw, "_connection", None)
    sock = getattr(connection, "sock", None)
    if isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):  # closed already
            sock.shutdown(socket.SHUT_RDWR)
    response.close()
