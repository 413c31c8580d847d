"""An agent-like Starlette app speaking the agent contract, backed by mirbad_runtime's FakeDriver.

Only tests use it (the orchestration library never imports mirbad_runtime): it answers every route the
master's agent client calls, runs a simple admission (budget against available minus reserve), and can
be told to refuse, stall or end a log stream with an error. Serve it with real uvicorn over real mutual
TLS (tests._support.asgi_server.serve_asgi) or in-process with httpx.ASGITransport.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from mirbad_protocol import GpuMemory, MemorySnapshot, ModelMetrics, WireModel
from mirbad_protocol.agent import (
    AGENT_API_PREFIX,
    LOG_STREAM_MEDIA_TYPE,
    AgentErrorCode,
    AgentInfo,
    ContainerRuntimeInfo,
    FolderEntry,
    FolderListing,
    GgufInfo,
    GgufInspectRequest,
    GpuList,
    HostGpuSample,
    LogEnd,
    LogLine,
    LogTail,
    ModelConfigInfo,
    ModelFile,
    ModelFileList,
    ModelFilesRequest,
    ModelTelemetry,
    RestartRequest,
    StartRequest,
    StatusList,
    TelemetrySnapshot,
    agent_error_body,
)
from mirbad_protocol.downloads import (
    DownloadFile,
    DownloadJob,
    DownloadList,
    DownloadSize,
    HuggingFaceDownload,
    OllamaDownload,
)
from mirbad_runtime import LaunchRejectedError, ModelNotFoundError
from mirbad_runtime.testing import FakeDriver

__all__ = ["FakeAgent", "Refusal"]


@dataclass
class Refusal:
    """An answer the fake sends instead of the real one (status with a JSON envelope, or raw text)."""

    status: int
    code: AgentErrorCode | None = None
    message: str = "refused by the test"
    raw: str | None = None
    field: str | None = None


@dataclass
class FakeAgent:
    """The state behind the app; tests steer it through its attributes and its driver."""

    node_name: str = "node-1"
    driver: FakeDriver = field(default_factory=FakeDriver)
    memory: MemorySnapshot = field(
        default_factory=lambda: MemorySnapshot(total_gib=128.0, available_gib=100.0, reserve_gib=4.0)
    )
    gpus: list[GpuMemory] = field(default_factory=list)
    telemetry: dict[str, list[ModelMetrics]] = field(default_factory=dict)
    host_samples: list[HostGpuSample] = field(default_factory=list)
    gguf: dict[str, GgufInfo] = field(default_factory=dict)
    model_configs: dict[str, ModelConfigInfo] = field(default_factory=dict)
    """What ``/model-config`` answers for a model folder, by path (others: path_not_found)."""
    boot_id: str | None = None
    cpu_count: int | None = None
    refusals: dict[str, Refusal] = field(default_factory=dict)
    """Route name -> the refusal it answers with (until removed)."""
    stall: anyio.Event | None = None
    """While set to an unset event, every route waits for it before answering (a wedged agent)."""
    log_error: str | None = None
    """When set, a followed log ends with an ``error`` event carrying this message."""
    requests: list[tuple[str, str]] = field(default_factory=list)
    """Every request seen: (method, path), with its query."""
    bodies: list[Any] = field(default_factory=list)
    """The JSON body of every POST seen, in order."""
    download_features: list[str] = field(default_factory=list)
    """Feature flags reported besides the fixed ones (``downloads.hf-native``, ``downloads.ollama``)."""
    downloads: dict[str, DownloadJob] = field(default_factory=dict)
    """The download jobs, by id: a start adds one ``running`` with nothing done; tests move them on."""
    present_files: set[str] | None = None
    """The paths ``/model-files`` finds under the model roots; None: no such route (an older agent)."""
    download_sizes: dict[str, int] | None = None
    """The bytes ``/downloads/size`` answers by source (``owner/name@revision``), one file each; a source
    not listed is not on the hub (404). None: no such route and no ``downloads.size`` flag."""

    @property
    def app(self) -> Starlette:
        """The ASGI app."""
        routes = [
            Route(AGENT_API_PREFIX + path, self._guard(name, handler), methods=[method])
            for name, method, path, handler in self._table()
        ]
        return Starlette(routes=routes)

    def _table(self) -> list[tuple[str, str, str, Any]]:
        return [
            ("runtimes", "GET", "/runtimes", self._runtimes),
            ("models", "GET", "/models", self._models),
            ("model", "GET", "/models/{model_id}", self._model),
            ("start", "POST", "/models/{model_id}/start", self._start),
            ("stop", "POST", "/models/{model_id}/stop", self._stop),
            ("restart", "POST", "/models/{model_id}/restart", self._restart),
            ("logs", "GET", "/models/{model_id}/logs", self._logs),
            ("memory", "GET", "/node/memory", self._memory),
            ("gpus", "GET", "/node/gpus", self._gpus),
            ("telemetry", "GET", "/telemetry", self._telemetry),
            ("gguf", "POST", "/gguf/inspect", self._gguf),
            ("model_config", "GET", "/model-config", self._model_config),
            ("folders", "GET", "/folders", self._folders),
            ("model_files", "POST", "/model-files", self._model_files),
            ("downloads", "GET", "/downloads", self._downloads),
            ("download_start", "POST", "/downloads", self._download_start),
            ("download_size", "POST", "/downloads/size", self._download_size),
            ("download", "GET", "/downloads/{download_id}", self._download),
            ("download_remove", "DELETE", "/downloads/{download_id}", self._download_remove),
            ("download_cancel", "POST", "/downloads/{download_id}/cancel", self._download_cancel),
            ("download_retry", "POST", "/downloads/{download_id}/retry", self._download_retry),
        ]

    def _guard(self, name: str, handler: Any) -> Any:
        async def endpoint(request: Request) -> Response:
            query = f"?{request.url.query}" if request.url.query else ""
            self.requests.append((request.method, request.url.path + query))
            if request.method == "POST" and await request.body():
                self.bodies.append(await request.json())
            if self.stall is not None:
                await self.stall.wait()
            refusal = self.refusals.get(name)
            if refusal is not None:
                if refusal.raw is not None:
                    return Response(refusal.raw, status_code=refusal.status, media_type="text/plain")
                assert refusal.code is not None
                return _error(refusal.code, refusal.message, refusal.field)
            try:
                answer: Response = await handler(request)
            except ModelNotFoundError as exc:
                return _error(AgentErrorCode.MODEL_NOT_FOUND, str(exc))
            except LaunchRejectedError as exc:
                return _error(AgentErrorCode.SPEC_REJECTED, str(exc))
            return answer

        return endpoint

    # ------------------------------------------------------------ routes

    async def _runtimes(self, request: Request) -> Response:
        info = AgentInfo(
            node_name=self.node_name,
            version="0.1.0-test",
            runtimes=[ContainerRuntimeInfo(runtime="vllm", network="mirbad")],
            features=[
                "runtime.vllm.container",
                "telemetry.ring",
                "logs.follow",
                "some.future-flag",
                *self.download_features,
                *(["model-files.check"] if self.present_files is not None else []),
                *(["downloads.size"] if self.download_sizes is not None else []),
            ],
            model_roots=["/models"],
            cpu_count=self.cpu_count,
        )
        body = info.to_wire()
        if self.boot_id is not None:
            body["bootId"] = self.boot_id
        return JSONResponse(body)

    async def _models(self, request: Request) -> Response:
        return _ok(StatusList(models=await self.driver.list_statuses()))

    async def _model(self, request: Request) -> Response:
        return _ok(await self.driver.status(request.path_params["model_id"]))

    async def _start(self, request: Request) -> Response:
        body = StartRequest.from_wire(await request.json())
        force = body.force or request.query_params.get("force") == "true"
        refused = self._admission(body.spec.budget_gib, force=force, released=0.0)
        return refused or _ok(await self.driver.start(body.spec))

    async def _restart(self, request: Request) -> Response:
        body = RestartRequest.from_wire(await request.json())
        current = await self.driver.status(body.spec.model_id)
        refused = self._admission(body.spec.budget_gib, force=body.force, released=current.budget_gib or 0.0)
        if refused is not None:
            return refused
        await self.driver.stop(body.spec.model_id)
        return _ok(await self.driver.start(body.spec))

    async def _stop(self, request: Request) -> Response:
        model_id = request.path_params["model_id"]
        await self.driver.stop(model_id)
        return _ok(await self.driver.status(model_id))

    async def _logs(self, request: Request) -> Response:
        model_id = request.path_params["model_id"]
        tail = int(request.query_params.get("tail", "200"))
        if request.query_params.get("follow") != "true":
            return _ok(LogTail(model_id=model_id, lines=await self.driver.logs(model_id, tail)))
        await self.driver.logs(model_id, 0)  # an unknown model is refused before the stream starts
        return StreamingResponse(self._follow(model_id, tail), media_type=LOG_STREAM_MEDIA_TYPE)

    async def _follow(self, model_id: str, tail: int) -> AsyncIterator[bytes]:
        async for line in self.driver.follow_logs(model_id, tail):
            yield _ndjson(LogLine(line=line))
        if self.log_error is not None:
            yield _ndjson(LogEnd(reason="error", message=self.log_error))
        else:
            yield _ndjson(LogEnd())

    async def _memory(self, request: Request) -> Response:
        return _ok(self.memory)

    async def _gpus(self, request: Request) -> Response:
        return _ok(GpuList(gpus=self.gpus))

    async def _telemetry(self, request: Request) -> Response:
        wanted = request.query_params.get("model")
        since_text = request.query_params.get("since")
        since = datetime.fromisoformat(since_text) if since_text else None
        limit = int(request.query_params["limit"]) if "limit" in request.query_params else None
        models = []
        for model_id in sorted(self.telemetry):
            if wanted is not None and model_id != wanted:
                continue
            samples = [sample for sample in self.telemetry[model_id] if since is None or sample.at > since]
            if limit is not None:
                samples = samples[-limit:]
            if samples:
                models.append(ModelTelemetry(model_id=model_id, samples=samples))
        host = [sample for sample in self.host_samples if since is None or sample.at > since]
        snapshot = TelemetrySnapshot(
            taken_at=datetime.now(UTC),
            interval_s=5.0,
            models=models,
            host_samples=host if wanted is None else [],
        )
        return _ok(snapshot)

    async def _gguf(self, request: Request) -> Response:
        body = GgufInspectRequest.from_wire(await request.json())
        info = self.gguf.get(body.path)
        if info is None:
            return _error(AgentErrorCode.PATH_NOT_FOUND, f"nothing at {body.path}")
        return _ok(info)

    async def _model_config(self, request: Request) -> Response:
        path = request.query_params.get("path", "")
        info = self.model_configs.get(path)
        if info is None:
            return _error(AgentErrorCode.PATH_NOT_FOUND, f"nothing at {path}")
        return _ok(info)

    async def _folders(self, request: Request) -> Response:
        path = request.query_params.get("path", "")
        entries = [
            FolderEntry(name="qwen", kind="directory"),
            FolderEntry(name="a.gguf", kind="file", size_bytes=3),
        ]
        return _ok(FolderListing(root=int(request.query_params.get("root", "0")), path=path, entries=entries))

    async def _model_files(self, request: Request) -> Response:
        if self.present_files is None:
            return _error(AgentErrorCode.ROUTE_NOT_FOUND, "no such route")
        body = ModelFilesRequest.from_wire(await request.json())
        files = [ModelFile(path=path, present=path in self.present_files) for path in body.paths]
        return _ok(ModelFileList(files=files))

    async def _downloads(self, request: Request) -> Response:
        jobs = sorted(self.downloads.values(), key=lambda job: job.created_at, reverse=True)
        return _ok(DownloadList(downloads=jobs))

    async def _download_start(self, request: Request) -> Response:
        data = await request.json()
        body = (HuggingFaceDownload if data.get("kind") == "huggingface" else OllamaDownload).from_wire(data)
        if any(job.folder == body.folder and job.root == body.root for job in self.downloads.values()):
            return _error(AgentErrorCode.DOWNLOAD_CONFLICT, f"folder {body.folder!r} is taken", "folder")
        now = datetime.now(UTC)
        files = [DownloadFile(path="model.gguf", size_bytes=1000)]
        job = DownloadJob(
            id=f"dl-{len(self.downloads) + 1:012x}",  # the real agent's shape, which the master checks
            kind=body.kind,
            source=body.source,
            root=body.root,
            folder=body.folder,
            state="running",
            files=files,
            total_bytes=1000,
            created_at=now,
            updated_at=now,
        )
        self.downloads[job.id] = job
        return JSONResponse(job.to_wire(), status_code=202)

    async def _download_size(self, request: Request) -> Response:
        data = await request.json()
        body = (HuggingFaceDownload if data.get("kind") == "huggingface" else OllamaDownload).from_wire(data)
        if self.download_sizes is None:
            return _error(AgentErrorCode.ROUTE_NOT_FOUND, "no such route")
        size = self.download_sizes.get(body.source)
        if size is None:
            return _error(AgentErrorCode.SOURCE_NOT_FOUND, f"the hub has no {body.source}", "repoId")
        return _ok(DownloadSize(revision="c" * 40, total_bytes=size, file_count=1))

    def _job(self, request: Request) -> DownloadJob | Response:
        job = self.downloads.get(request.path_params["download_id"])
        if job is None:
            return _error(AgentErrorCode.DOWNLOAD_NOT_FOUND, "no download job with that id")
        return job

    async def _download(self, request: Request) -> Response:
        job = self._job(request)
        return job if isinstance(job, Response) else _ok(job)

    async def _download_cancel(self, request: Request) -> Response:
        job = self._job(request)
        if isinstance(job, Response):
            return job
        self.downloads[job.id] = job.model_copy(update={"state": "cancelled"})
        return _ok(self.downloads[job.id])

    async def _download_retry(self, request: Request) -> Response:
        job = self._job(request)
        if isinstance(job, Response):
            return job
        if job.state not in ("failed", "cancelled"):
            return _error(AgentErrorCode.DOWNLOAD_CONFLICT, f"download {job.id} is {job.state}", "state")
        self.downloads[job.id] = job.model_copy(update={"state": "queued", "error": None})
        return _ok(self.downloads[job.id])

    async def _download_remove(self, request: Request) -> Response:
        job = self._job(request)
        if isinstance(job, Response):
            return job
        del self.downloads[job.id]
        return Response(status_code=204)

    def _admission(self, budget_gib: float, *, force: bool, released: float) -> Response | None:
        free = self.memory.available_gib + released - self.memory.reserve_gib
        if force or budget_gib <= free:
            return None
        message = f"the model needs {budget_gib} GiB but only {free} GiB are free"
        return _error(AgentErrorCode.ADMISSION_REFUSED, message)


def _ok(model: WireModel) -> Response:
    return JSONResponse(model.to_wire())


def _error(code: AgentErrorCode, message: str, field: str | None = None) -> Response:
    return JSONResponse(agent_error_body(code, message, field=field), status_code=code.http_status)


def _ndjson(event: WireModel) -> bytes:
    return (json.dumps(event.to_wire()) + "\n").encode()
