"""The master's client of one node agent: a typed method per agent route, refusals mapped to exceptions.

Every call carries an explicit timeout (:class:`AgentTimeouts`). Whatever goes wrong surfaces as a
:class:`~mirbad_orchestration.exceptions.NodeError` subclass, so callers never see httpx:

- the agent could not be reached (refused, no route, TLS refused, wrong certificate): NodeUnreachableError;
- it took the request but did not answer in time: NodeTimeoutError;
- it refused with its error envelope: an AgentRequestError subclass chosen by the envelope's ``code``
  (``spec_rejected`` AgentLaunchRejectedError, ``admission_refused`` AgentAdmissionRefusedError,
  ``start_conflict`` AgentStartConflictError, ``model_not_found`` ModelNotOnNodeError);
- it answered something outside the contract: AgentProtocolError.

Every request names the master (its instance id and fencing epoch, from ``fence``) in the fencing
headers; an agent that follows a newer master refuses a command with ``fenced``: AgentFencedError.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Final, TypeVar
from urllib.parse import quote

import httpx
from pydantic import Field, TypeAdapter, ValidationError

from mirbad_orchestration.exceptions import AgentProtocolError, LogStreamError
from mirbad_protocol import (
    ContainerLaunch,
    GpuMemory,
    InvalidFieldError,
    MemorySnapshot,
    ModelStatus,
    ProcessLaunch,
    WireModel,
)
from mirbad_protocol.agent import (
    AGENT_API_PREFIX,
    LOG_STREAM_MEDIA_TYPE,
    ROUTE_FENCE,
    ROUTE_FOLDERS,
    ROUTE_GGUF_INSPECT,
    ROUTE_GPUS,
    ROUTE_HOST_CONTAINERS,
    ROUTE_MEMORY,
    ROUTE_MODEL,
    ROUTE_MODEL_CONFIG,
    ROUTE_MODEL_FILES,
    ROUTE_MODEL_LOGS,
    ROUTE_MODEL_RESTART,
    ROUTE_MODEL_START,
    ROUTE_MODEL_STOP,
    ROUTE_MODELS,
    ROUTE_RUNTIMES,
    ROUTE_TELEMETRY,
    AgentInfo,
    ContainerAction,
    ContainerActionResult,
    ContainerService,
    ContainerServiceList,
    FenceState,
    FolderListing,
    GgufInfo,
    GgufInspectRequest,
    GpuList,
    LogEnd,
    LogLine,
    LogTail,
    MasterFence,
    ModelConfigInfo,
    ModelFile,
    ModelFileList,
    ModelFilesRequest,
    RestartPolicy,
    RestartRequest,
    StartRequest,
    StatusList,
    TelemetrySnapshot,
    agent_path,
    fence_headers,
    proxy_path,
)
from mirbad_protocol.downloads import (
    ROUTE_DOWNLOAD,
    ROUTE_DOWNLOAD_CANCEL,
    ROUTE_DOWNLOAD_RETRY,
    ROUTE_DOWNLOAD_SIZE,
    ROUTE_DOWNLOADS,
    DownloadJob,
    DownloadList,
    DownloadSize,
    HuggingFaceDownload,
    OllamaDownload,
)
from mirbad_protocol.hostd import (
    ROUTE_HOST_BACKUP_MOUNT,
    ROUTE_HOST_BACKUP_MOUNT_TEST,
    ROUTE_HOST_SERVICES,
    ROUTE_HOST_WHITELIST,
    BackupMountRemoved,
    BackupMountStatus,
    BackupShare,
    BackupShareProbe,
    HostdAction,
    HostdActionResult,
    ServiceList,
    WhitelistAdd,
    WhitelistEntry,
    WhitelistUpdate,
)
from mirbad_protocol.releases import (
    ROUTE_IMAGE_PULL,
    ROUTE_IMAGE_PULL_CANCEL,
    ROUTE_IMAGE_PULLS,
    ROUTE_IMAGES,
    ROUTE_LLAMA_SERVER_BUILDS,
    ImageInfo,
    ImageList,
    ImagePull,
    ImagePullList,
    ImagePullRequest,
    LlamaServerBinary,
    LlamaServerBuildList,
)

from ._agent_errors import refusal_error, transport_error

__all__ = ["AgentClient", "AgentTimeouts", "FenceSource"]

FenceSource = Callable[[], Awaitable[MasterFence | None]]
"""Who the master is now (instance id and epoch), asked before each request; None: send no fence."""

_WireT = TypeVar("_WireT", bound=WireModel)
_LOG_EVENT: Final = TypeAdapter[LogLine | LogEnd](Annotated[LogLine | LogEnd, Field(discriminator="kind")])
# How a kept-alive connection the agent closed meanwhile fails: the request may never have reached it.
# A failure to connect is not among them: that connection was fresh already.
_DROPPED_CONNECTION: Final = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)


@dataclass(frozen=True)
class AgentTimeouts:
    """Seconds each kind of agent call may take.

    Attributes:
        connect_s: to open the TLS connection.
        read_s: the answer of a quick call (info, statuses, memory, logs, telemetry, folders).
        start_s: a start or restart; the agent may pull a container image first.
        stop_s: a stop (a container gets 30 s to exit, then it is removed).
        inspect_s: a GGUF header read (a large file on a slow disk).
    """

    connect_s: float = 5.0
    read_s: float = 10.0
    start_s: float = 1800.0
    stop_s: float = 120.0
    inspect_s: float = 30.0


class AgentClient:
    """Calls one node's agent at ``{agent_url}/agent/v1``.

    Args:
        node_id: the node's id, named in every error.
        agent_url: the agent's base URL (``https://host:9443``).
        transport: how requests travel: the mutual-TLS transport of
            :class:`~mirbad_orchestration.fleet.AgentClients` in production, anything httpx accepts in tests.
        timeouts: the seconds each kind of call may take.
        fresh_transport: builds a transport with no pooled connection; a read (GET) whose kept-alive
            connection dropped is sent once more through it before the node counts as unreachable.
            None: no such retry.
        fence: the master's instance id and epoch, sent on every request (read each time: a takeover
            raises the epoch while the master runs). None: no fencing headers (tests of the client).
    """

    def __init__(
        self,
        node_id: str,
        agent_url: str,
        transport: httpx.AsyncBaseTransport,
        *,
        timeouts: AgentTimeouts | None = None,
        fresh_transport: Callable[[], httpx.AsyncBaseTransport] | None = None,
        fence: FenceSource | None = None,
    ) -> None:
        self.node_id = node_id
        self.agent_url = agent_url.rstrip("/")
        self.timeouts = timeouts or AgentTimeouts()
        self._fresh_transport = fresh_transport
        # trust_env off: no proxy, netrc or extra CA from the environment ever stands between the two.
        hooks = {"request": [self._add_fence]} if fence is not None else {}
        self._fence = fence
        self._http = httpx.AsyncClient(
            base_url=self.agent_url,
            transport=transport,
            trust_env=False,
            follow_redirects=False,
            event_hooks=hooks,
        )

    async def _add_fence(self, request: httpx.Request) -> None:
        assert self._fence is not None
        fence = await self._fence()
        if fence is not None:
            request.headers.update(fence_headers(fence))

    @property
    def http(self) -> httpx.AsyncClient:
        """The underlying client, for the router's proxy through the agent (never close it yourself)."""
        return self._http

    def proxy_base_url(self, model_id: str) -> str:
        """Where the agent proxies to the model's own server: ``{agent_url}/agent/v1/proxy/{id}/``."""
        return self.agent_url + proxy_path(model_id, "")

    async def aclose(self) -> None:
        """Close the connections to the agent."""
        await self._http.aclose()

    async def info(self) -> AgentInfo:
        """The agent's runtimes, feature flags and model roots."""
        return await self._get(AgentInfo, agent_path(ROUTE_RUNTIMES))

    async def fence(self) -> FenceState:
        """The master the node follows (the instance id and epoch of the newest command it took)."""
        return await self._get(FenceState, agent_path(ROUTE_FENCE))

    async def claim(self) -> FenceState:
        """Have the node follow this master from now on (its fence rises to this master's epoch).

        Raises:
            AgentFencedError: the node follows a newer master already.
        """
        return await self._call(FenceState, "POST", agent_path(ROUTE_FENCE), self.timeouts.read_s)

    async def start(self, spec: ContainerLaunch | ProcessLaunch, *, force: bool = False) -> ModelStatus:
        """Launch ``spec`` (admission first, unless ``force``) and return the model's first status."""
        body = StartRequest(spec=spec, force=force).to_wire()
        path = agent_path(ROUTE_MODEL_START, model_id=spec.model_id)
        return await self._call(ModelStatus, "POST", path, self.timeouts.start_s, json=body)

    async def restart(self, spec: ContainerLaunch | ProcessLaunch, *, force: bool = False) -> ModelStatus:
        """Replace the running instance with ``spec``; its budget counts as free for admission."""
        body = RestartRequest(spec=spec, force=force).to_wire()
        path = agent_path(ROUTE_MODEL_RESTART, model_id=spec.model_id)
        return await self._call(ModelStatus, "POST", path, self.timeouts.start_s, json=body)

    async def stop(self, model_id: str) -> ModelStatus:
        """Stop and remove the model's instance; the resulting status (Stopped)."""
        path = agent_path(ROUTE_MODEL_STOP, model_id=model_id)
        return await self._call(ModelStatus, "POST", path, self.timeouts.stop_s, model_id=model_id)

    async def status(self, model_id: str) -> ModelStatus:
        """The model's status on this node (Stopped when it has no instance)."""
        return await self._get(ModelStatus, agent_path(ROUTE_MODEL, model_id=model_id), model_id=model_id)

    async def statuses(self) -> list[ModelStatus]:
        """Every model instance on this node, in id order."""
        return (await self._get(StatusList, agent_path(ROUTE_MODELS))).models

    async def logs(self, model_id: str, *, tail: int = 200) -> list[str]:
        """The model's last ``tail`` log lines, oldest first."""
        path = agent_path(ROUTE_MODEL_LOGS, model_id=model_id)
        answer = await self._get(LogTail, path, params={"tail": tail}, model_id=model_id)
        return answer.lines

    async def follow_logs(
        self, model_id: str, *, tail: int = 0, idle_timeout_s: float | None = None
    ) -> AsyncGenerator[str, None]:
        """Yield the last ``tail`` lines, then each new line, until the model exits.

        A running model's log has no end: bound the loop (a cancel scope, or ``idle_timeout_s`` for the
        longest silence allowed) and close the generator (``contextlib.aclosing``) to release the
        connection at once.

        Raises:
            LogStreamError: the agent could not read the model's log any further.
            NodeTimeoutError: nothing arrived for ``idle_timeout_s`` seconds.
        """
        path = agent_path(ROUTE_MODEL_LOGS, model_id=model_id)
        params: dict[str, str | int] = {"tail": tail, "follow": "true"}
        # Only the wait for the next line may be unbounded; connecting and sending never are.
        bounded = self.timeouts.connect_s
        timeout = httpx.Timeout(connect=bounded, read=idle_timeout_s, write=bounded, pool=bounded)
        headers = {"accept": LOG_STREAM_MEDIA_TYPE}
        try:
            async with self._http.stream(
                "GET", path, params=params, timeout=timeout, headers=headers
            ) as answer:
                if answer.is_error:
                    await answer.aread()
                    raise refusal_error(self.node_id, answer, model_id)
                async for text in answer.aiter_lines():
                    if not text.strip():
                        continue
                    event = self._log_event(text)
                    if isinstance(event, LogEnd):
                        if event.reason == "error":
                            detail = event.message or "reading the log failed"
                            raise LogStreamError(self.node_id, f"node {self.node_id!r}: {detail}")
                        return
                    yield event.line
        except httpx.HTTPError as exc:
            raise transport_error(self.node_id, self.agent_url, exc) from exc

    async def memory(self) -> MemorySnapshot:
        """The node's memory now, with its discrete GPUs and admission reserve."""
        return await self._get(MemorySnapshot, agent_path(ROUTE_MEMORY))

    async def gpus(self) -> list[GpuMemory]:
        """The node's discrete GPUs as nvidia-smi reports them (none on unified memory)."""
        return (await self._get(GpuList, agent_path(ROUTE_GPUS))).gpus

    async def telemetry(
        self, *, model_id: str | None = None, since: datetime | None = None, limit: int | None = None
    ) -> TelemetrySnapshot:
        """The agent's telemetry ring: every model's samples, or ``model_id``'s, taken after ``since``."""
        params: dict[str, str | int] = {}
        if model_id is not None:
            params["model"] = model_id
        if since is not None:
            params["since"] = since.isoformat()
        if limit is not None:
            params["limit"] = limit
        return await self._get(
            TelemetrySnapshot, agent_path(ROUTE_TELEMETRY), params=params, model_id=model_id
        )

    async def gguf_inspect(self, path: str) -> GgufInfo:
        """The header facts of a GGUF file, ``path`` relative to one of the node's model roots."""
        body = GgufInspectRequest(path=path).to_wire()
        return await self._call(
            GgufInfo, "POST", agent_path(ROUTE_GGUF_INSPECT), self.timeouts.inspect_s, json=body
        )

    async def folders(self, *, root: int = 0, path: str = "") -> FolderListing:
        """The entries of the folder ``path`` under the node's model root number ``root``."""
        return await self._get(FolderListing, agent_path(ROUTE_FOLDERS), params={"root": root, "path": path})

    async def model_config(self, path: str) -> ModelConfigInfo:
        """The ``config.json`` and weights' size of the model folder ``path`` (relative to a model root).

        Older agents do not have the route (404, ``route_not_found``).
        """
        return await self._get(ModelConfigInfo, agent_path(ROUTE_MODEL_CONFIG), params={"path": path})

    async def model_files(self, paths: Sequence[str]) -> list[ModelFile]:
        """Whether each of ``paths`` (a ``modelPath``, a source's folder) is on the node, in the order given.

        Only agents reporting :attr:`~mirbad_protocol.agent.FeatureFlag.MODEL_FILES` answer it (others: 404).
        """
        body = ModelFilesRequest(paths=list(paths)).to_wire()
        path = agent_path(ROUTE_MODEL_FILES)
        return (await self._call(ModelFileList, "POST", path, self.timeouts.read_s, json=body)).files

    async def start_download(self, request: HuggingFaceDownload | OllamaDownload) -> DownloadJob:
        """Start a download job; the agent checks the source and the free space before it answers.

        The request's token (if any) travels in the body over mutual TLS and never comes back.
        """
        body = request.to_wire()
        # The agent resolves the source (a hub round trip) before it answers: a start's patience.
        return await self._call(
            DownloadJob, "POST", agent_path(ROUTE_DOWNLOADS), self.timeouts.stop_s, json=body
        )

    async def download_size(self, request: HuggingFaceDownload | OllamaDownload) -> DownloadSize:
        """What ``request`` would fetch (its files' total and count), asked of its source by the agent.

        Nothing starts on the node. The token (if any) travels as a start's does and never comes back;
        the agent lists the source within its planning deadline, so this waits a start's patience.
        """
        body = request.to_wire()
        path = agent_path(ROUTE_DOWNLOAD_SIZE)
        return await self._call(DownloadSize, "POST", path, self.timeouts.stop_s, json=body)

    async def downloads(self) -> list[DownloadJob]:
        """Every download job the agent knows, newest first, with its progress."""
        return (await self._get(DownloadList, agent_path(ROUTE_DOWNLOADS))).downloads

    async def download(self, download_id: str) -> DownloadJob:
        """One download job with its per-file and overall progress."""
        return await self._get(DownloadJob, agent_path(ROUTE_DOWNLOAD, download_id=download_id))

    async def cancel_download(self, download_id: str) -> DownloadJob:
        """Stop a queued or running job; its partial files stay until :meth:`remove_download`."""
        path = agent_path(ROUTE_DOWNLOAD_CANCEL, download_id=download_id)
        return await self._call(DownloadJob, "POST", path, self.timeouts.read_s)

    async def retry_download(self, download_id: str) -> DownloadJob:
        """Run a failed or cancelled job again, from the verified bytes on its node's disk."""
        path = agent_path(ROUTE_DOWNLOAD_RETRY, download_id=download_id)
        return await self._call(DownloadJob, "POST", path, self.timeouts.read_s)

    async def remove_download(self, download_id: str) -> None:
        """Forget a stopped job and delete its partial files (a completed folder stays)."""
        path = agent_path(ROUTE_DOWNLOAD, download_id=download_id)
        timeout = httpx.Timeout(self.timeouts.read_s, connect=self.timeouts.connect_s)
        try:
            answer = await self._http.request("DELETE", path, timeout=timeout)
        except httpx.HTTPError as exc:
            raise transport_error(self.node_id, self.agent_url, exc) from exc
        if answer.is_error:
            raise refusal_error(self.node_id, answer, None)

    async def llama_server_builds(self) -> list[LlamaServerBinary]:
        """The node's catalogued llama-servers, each with what its ``--version`` reports.

        Only agents reporting :attr:`~mirbad_protocol.agent.FeatureFlag.LLAMA_SERVER_BUILDS` answer it.
        """
        # The agent asks each binary in turn, each bounded by 10 s: more than a quick read's patience.
        path = agent_path(ROUTE_LLAMA_SERVER_BUILDS)
        return (await self._call(LlamaServerBuildList, "GET", path, _RELEASES_QUERY_S)).builds

    async def images(self) -> list[ImageInfo]:
        """The vLLM images the node's Docker holds, newest first (agents reporting ``images.pull``)."""
        return (await self._call(ImageList, "GET", agent_path(ROUTE_IMAGES), _RELEASES_QUERY_S)).images

    async def start_image_pull(self, image: str) -> ImagePull:
        """Start pulling ``image`` on the node; the job at once, its progress by :meth:`image_pull`."""
        body = ImagePullRequest(image=image).to_wire()
        return await self._call(
            ImagePull, "POST", agent_path(ROUTE_IMAGE_PULLS), self.timeouts.read_s, json=body
        )

    async def image_pulls(self) -> list[ImagePull]:
        """The node's image pulls (running and recently finished), newest first."""
        return (await self._get(ImagePullList, agent_path(ROUTE_IMAGE_PULLS))).pulls

    async def image_pull(self, pull_id: str) -> ImagePull:
        """One image pull with its per-layer progress."""
        return await self._get(ImagePull, agent_path(ROUTE_IMAGE_PULL, pull_id=pull_id))

    async def cancel_image_pull(self, pull_id: str) -> ImagePull:
        """Stop a running image pull; the job as it was left."""
        path = agent_path(ROUTE_IMAGE_PULL_CANCEL, pull_id=pull_id)
        return await self._call(ImagePull, "POST", path, self.timeouts.read_s)

    # ------------------------------------------------------------ plumbing

    async def host_services(self, *, include_all: bool = False) -> ServiceList:
        """The node's whitelisted units from its hostd; with ``include_all`` discovery and the deny list.

        Raises:
            AgentRequestError: 503 ``hostd_unavailable`` on a node without hostd, or hostd's refusal.
        """
        params = {"include": "all"} if include_all else None
        return await self._call(
            ServiceList, "GET", _host_path(ROUTE_HOST_SERVICES), _HOST_QUERY_S, params=params
        )

    async def host_service_action(
        self, name: str, action: HostdAction, *, confirm: str | None = None
    ) -> HostdActionResult:
        """Queue ``action`` on the whitelisted unit ``name`` (``confirm``: a protected one's typed name)."""
        params = {"confirm": confirm} if confirm is not None else None
        path = _host_path("/host/services/{}/{}", name, action)
        return await self._call(HostdActionResult, "POST", path, self.timeouts.stop_s, params=params)

    async def host_whitelist_add(self, request: WhitelistAdd) -> WhitelistEntry:
        """Add a unit to the node's hostd whitelist."""
        path = _host_path(ROUTE_HOST_WHITELIST)
        return await self._call(WhitelistEntry, "POST", path, self.timeouts.stop_s, json=request.to_wire())

    async def host_whitelist_update(self, name: str, request: WhitelistUpdate) -> WhitelistEntry:
        """Change a whitelist entry's display name or protection."""
        path = _host_path("/host/whitelist/{}", name)
        return await self._call(WhitelistEntry, "PATCH", path, self.timeouts.stop_s, json=request.to_wire())

    async def host_whitelist_remove(self, name: str) -> WhitelistEntry:
        """Remove a whitelist entry; the removed entry."""
        path = _host_path("/host/whitelist/{}", name)
        return await self._call(WhitelistEntry, "DELETE", path, self.timeouts.stop_s)

    async def host_containers(self) -> ContainerServiceList:
        """The node's containers that can be host services (not Mirbad's own, models' or downloads')."""
        return await self._call(ContainerServiceList, "GET", _host_path(ROUTE_HOST_CONTAINERS), _HOST_QUERY_S)

    async def host_container_action(self, name: str, action: ContainerAction) -> ContainerActionResult:
        """Start, stop or restart the container ``name``."""
        path = _host_path("/host/containers/{}/{}", name, action)
        return await self._call(ContainerActionResult, "POST", path, self.timeouts.stop_s)

    async def host_container_restart_policy(self, name: str, policy: RestartPolicy) -> ContainerService:
        """Set the container's restart policy (its autostart); the container afterwards."""
        path = _host_path("/host/containers/{}/restart-policy", name)
        return await self._call(ContainerService, "PUT", path, self.timeouts.stop_s, json=policy.to_wire())

    async def host_backup_mount(self) -> BackupMountStatus:
        """The backup share the node's hostd manages and what is mounted at its target."""
        path = _host_path(ROUTE_HOST_BACKUP_MOUNT)
        return await self._call(BackupMountStatus, "GET", path, self.timeouts.read_s)

    async def host_backup_mount_apply(self, share: BackupShare) -> BackupMountStatus:
        """Have the node's hostd test, write and mount ``share``; the status afterwards.

        Raises:
            AgentRequestError: hostd's refusal (``mount_conflict`` 409, ``mount_failed`` 422, a field 422,
                ``action_failed`` 502) or 503 ``hostd_unavailable``.
        """
        path = _host_path(ROUTE_HOST_BACKUP_MOUNT)
        return await self._call(BackupMountStatus, "PUT", path, _MOUNT_APPLY_S, json=share.to_wire())

    async def host_backup_mount_test(self, share: BackupShare) -> BackupShareProbe:
        """Have the node's hostd mount ``share`` aside and write a file on it as the backup account."""
        path = _host_path(ROUTE_HOST_BACKUP_MOUNT_TEST)
        return await self._call(BackupShareProbe, "POST", path, self.timeouts.stop_s, json=share.to_wire())

    async def host_backup_mount_remove(self) -> BackupMountRemoved:
        """Have the node's hostd unmount the share and remove its unit, credentials and state."""
        path = _host_path(ROUTE_HOST_BACKUP_MOUNT)
        return await self._call(BackupMountRemoved, "DELETE", path, self.timeouts.stop_s)

    async def _get(
        self,
        model: type[_WireT],
        path: str,
        *,
        params: Mapping[str, str | int] | None = None,
        model_id: str | None = None,
    ) -> _WireT:
        return await self._call(model, "GET", path, self.timeouts.read_s, params=params, model_id=model_id)

    async def _call(
        self,
        model: type[_WireT],
        method: str,
        path: str,
        read_s: float,
        *,
        json: object = None,
        params: Mapping[str, str | int] | None = None,
        model_id: str | None = None,
    ) -> _WireT:
        timeout = httpx.Timeout(read_s, connect=self.timeouts.connect_s)
        try:
            try:
                answer = await self._http.request(method, path, json=json, params=params, timeout=timeout)
            except _DROPPED_CONNECTION:
                # Only reads are sent twice: a start or stop must never run twice behind the caller.
                if method != "GET" or self._fresh_transport is None:
                    raise
                answer = await self._get_on_fresh_connection(self._fresh_transport(), path, params, timeout)
        except httpx.HTTPError as exc:
            raise transport_error(self.node_id, self.agent_url, exc) from exc
        if answer.is_error:
            raise refusal_error(self.node_id, answer, model_id)
        try:
            return model.from_wire_json(answer.content)
        except InvalidFieldError as exc:
            raise AgentProtocolError(
                self.node_id, f"node {self.node_id!r} answered {method} {path} outside the contract: {exc}"
            ) from None

    async def _get_on_fresh_connection(
        self,
        transport: httpx.AsyncBaseTransport,
        path: str,
        params: Mapping[str, str | int] | None,
        limits: httpx.Timeout,
    ) -> httpx.Response:
        # A pool of its own: the shared one may hold more connections the agent closed at the same moment.
        async with httpx.AsyncClient(
            base_url=self.agent_url, transport=transport, trust_env=False, follow_redirects=False
        ) as once:
            answer = await once.get(path, params=params, timeout=limits)
            await answer.aread()
            return answer

    def _log_event(self, text: str) -> LogLine | LogEnd:
        try:
            return _LOG_EVENT.validate_json(text)
        except ValidationError:
            raise AgentProtocolError(
                self.node_id, f"node {self.node_id!r} sent a log event outside the contract: {text[:200]}"
            ) from None


_RELEASES_QUERY_S: Final = 60.0  # a --version per catalogued llama-server, or Docker's image listing
_MOUNT_APPLY_S: Final = 180.0  # hostd's own client waits 150 s for a probe, a reload and a restart
_HOST_QUERY_S: Final = 30.0  # hostd bounds each systemctl listing by 15 s; discovery may take two


def _host_path(route: str, *segments: str) -> str:
    # The ROUTE_HOST_* templates use Starlette's {name:path}; each value here is one encoded segment.
    return AGENT_API_PREFIX + route.format(*(quote(value, safe="") for value in segments))
