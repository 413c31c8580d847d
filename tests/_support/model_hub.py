"""Loopback stand-ins for a Hugging Face hub and an Ollama registry, as small Starlette apps.

:class:`TestHub` answers the endpoints ``huggingface_hub`` and the agent's downloader call: repository
info by revision (``/api/models/{repo}/revision/{rev}?blobs=true``) and file resolve
(``/{repo}/resolve/{rev}/{path}``) with ETag, X-Repo-Commit, X-Linked-Size/X-Linked-Etag for LFS files
and Range. :class:`TestRegistry` answers Ollama's ``/v2/{name}/manifests/{tag}`` and
``/v2/{name}/blobs/{digest}`` (also with Range). Both can hold a transfer after a number of bytes
until the test releases it, which makes "mid-file" deterministic without any sleep.

Both can also lie (:class:`Lies`: an outage status, answers without end, files drip-fed a byte at a
time), and :func:`silent_endpoint` and :func:`refused_endpoint` stand for a source that accepts and never
answers and one where nothing listens.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Final

import anyio
import anyio.lowlevel
from anyio.abc import SocketAttribute, SocketStream
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .asgi_server import free_port, serve_asgi

HOLD_TIMEOUT_S: Final = 60.0
_CHUNK: Final = 16 * 1024
_RANGE: Final = re.compile(r"^bytes=(\d+)-$")
_LFS_SUFFIXES: Final = (".gguf", ".safetensors", ".bin")


@dataclass
class Hold:
    """Stops a transfer once ``after_bytes`` of a file are sent, until :meth:`release` (once only)."""

    path: str
    after_bytes: int
    reached: anyio.Event = field(default_factory=anyio.Event)
    released: anyio.Event = field(default_factory=anyio.Event)

    def release(self) -> None:
        """Let the held transfer (and every later one) go on."""
        self.released.set()


class DroppedConnection(Exception):  # noqa: N818 - what the test hub does, not an error of the test
    """Raised inside a response body: the server aborts the connection mid-file."""


@dataclass
class Drop:
    """Breaks the connection once ``after_bytes`` of a file are sent, ``times`` times."""

    path: str
    after_bytes: int
    times: int = 1


@dataclass
class Lies:
    """How a stand-in source misbehaves (every lie off by default; set them on ``hub.lies``).

    Attributes:
        status: every request answered with this status (an outage: 500, 502, 503 ...).
        endless: repository info, manifests and files never end (a file goes on past its size).
        drip_interval_s: a file's bytes are sent one at a time, this far apart.
        drip_metadata: repository info and manifests are drip-fed too, without end (each byte comes
            within any read timeout, so only a total deadline ends the wait).
        ignore_range: a Range header is ignored: every file is sent whole with 200.
    """

    status: int | None = None
    endless: bool = False
    drip_interval_s: float | None = None
    drip_metadata: bool = False
    ignore_range: bool = False


_ENDLESS_CHUNK: Final = b" " * (64 * 1024)


async def _endless(prefix: bytes) -> AsyncIterator[bytes]:
    yield prefix
    while True:
        yield _ENDLESS_CHUNK
        await anyio.lowlevel.checkpoint()  # lets the server notice the client has gone


@dataclass
class _Served:
    requests: list[tuple[str, str | None]] = field(default_factory=list)
    hold: Hold | None = None
    drop: Drop | None = None
    corrupt: set[str] = field(default_factory=set)
    lies: Lies = field(default_factory=Lies)

    def lie(self, metadata_prefix: bytes) -> Response | None:
        """The answer a lying source gives instead of the truth, if it lies about metadata."""
        if self.lies.status is not None:
            return JSONResponse({"error": "outage"}, status_code=self.lies.status)
        if self.lies.endless:
            return StreamingResponse(_endless(metadata_prefix), media_type="application/json")
        if self.lies.drip_metadata and self.lies.drip_interval_s is not None:
            endless = metadata_prefix + _ENDLESS_CHUNK * 1024
            return StreamingResponse(self._drip(endless, self.lies.drip_interval_s))
        return None

    def body(self, request: Request, key: str, data: bytes, headers: dict[str, str]) -> Response:
        """The file ``data`` (from the Range's offset), held, corrupted or lied about as the test asked."""
        requested = request.headers.get("range")
        self.requests.append((key, requested))
        if self.lies.status is not None:
            return JSONResponse({"error": "outage"}, status_code=self.lies.status)
        if self.lies.drip_interval_s is not None:
            return StreamingResponse(self._drip(data, self.lies.drip_interval_s), headers=headers)
        if self.lies.endless:
            return StreamingResponse(_endless(data), headers=headers)
        if key in self.corrupt:
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        start, status = 0, 200
        match = None if self.lies.ignore_range else _RANGE.match(requested or "")
        if match is not None:
            start, status = int(match.group(1)), 206
            if start >= len(data):
                return Response(status_code=416, headers={"Content-Range": f"bytes */{len(data)}"})
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        headers |= {"Content-Length": str(len(data) - start), "Accept-Ranges": "bytes"}
        if request.method == "HEAD":
            return Response(status_code=status, headers=headers)
        return StreamingResponse(self._chunks(key, data, start), status_code=status, headers=headers)

    async def _drip(self, data: bytes, interval_s: float) -> AsyncIterator[bytes]:
        for index in range(len(data)):
            yield data[index : index + 1]
            await anyio.sleep(interval_s)

    async def _chunks(self, key: str, data: bytes, start: int) -> AsyncIterator[bytes]:
        position = start
        while position < len(data):
            drop = self.drop
            if drop is not None and drop.path == key and drop.times > 0 and position >= drop.after_bytes:
                drop.times -= 1
                raise DroppedConnection(key)
            hold = self.hold
            if hold is not None and hold.path == key and not hold.released.is_set():
                if position >= hold.after_bytes:
                    hold.reached.set()
                    with anyio.fail_after(HOLD_TIMEOUT_S):
                        await hold.released.wait()
                end = min(len(data), max(position + 1, min(position + _CHUNK, hold.after_bytes)))
            else:
                end = min(len(data), position + _CHUNK)
            yield data[position:end]
            position = end


@dataclass
class _Repo:
    commit: str
    files: dict[str, bytes]
    private: bool = False


class TestHub(_Served):
    """A Hugging Face hub with the repositories a test adds (``add_repo``), on any ASGI server."""

    __test__ = False  # not a test class, despite its name

    def __init__(self, token: str = "hf_test_token") -> None:
        super().__init__()
        self.token = token
        self.repos: dict[str, _Repo] = {}
        self.authorizations: list[str | None] = []

    def add_repo(self, repo_id: str, files: dict[str, bytes], *, private: bool = False) -> str:
        """Add a repository whose ``main`` is one commit of ``files``; return that commit's id."""
        commit = hashlib.sha1(repo_id.encode() + "".join(sorted(files)).encode()).hexdigest()
        self.repos[repo_id] = _Repo(commit, dict(files), private)
        return commit

    def app(self) -> Starlette:
        """The ASGI app."""
        return Starlette(
            routes=[
                Route("/api/models/{owner}/{name}/revision/{revision}", self._info, methods=["GET"]),
                Route(
                    "/{owner}/{name}/resolve/{revision}/{path:path}", self._resolve, methods=["GET", "HEAD"]
                ),
            ]
        )

    def _lookup(self, request: Request) -> tuple[str, _Repo] | Response:
        repo_id = f"{request.path_params['owner']}/{request.path_params['name']}"
        self.authorizations.append(request.headers.get("authorization"))
        repo = self.repos.get(repo_id)
        if repo is None:
            return _hub_error(404, "RepoNotFound")
        if repo.private and request.headers.get("authorization") != f"Bearer {self.token}":
            return _hub_error(401, "RepoNotFound")
        if request.path_params["revision"] not in ("main", repo.commit):
            return _hub_error(404, "RevisionNotFound")
        return repo_id, repo

    async def _info(self, request: Request) -> Response:
        lied = self.lie(b'{"id": "x", "siblings": [')
        if lied is not None:
            return lied
        found = self._lookup(request)
        if isinstance(found, Response):
            return found
        repo_id, repo = found
        siblings = [_sibling(name, data) for name, data in sorted(repo.files.items())]
        return JSONResponse(
            {"id": repo_id, "sha": repo.commit, "private": repo.private, "siblings": siblings}
        )

    async def _resolve(self, request: Request) -> Response:
        found = self._lookup(request)
        if isinstance(found, Response):
            return found
        _, repo = found
        path = request.path_params["path"]
        data = repo.files.get(path)
        if data is None:
            return _hub_error(404, "EntryNotFound")
        headers = {"X-Repo-Commit": repo.commit, "ETag": f'"{_git_blob_id(data)}"'}
        if path.endswith(_LFS_SUFFIXES):
            sha = hashlib.sha256(data).hexdigest()
            headers |= {"ETag": f'"{sha}"', "X-Linked-Etag": f'"{sha}"', "X-Linked-Size": str(len(data))}
        return self.body(request, path, data, headers)


def _hub_error(status: int, code: str) -> Response:
    return JSONResponse({"error": code}, status_code=status, headers={"X-Error-Code": code})


def _git_blob_id(data: bytes) -> str:
    return hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest()


def _sibling(name: str, data: bytes) -> dict[str, object]:
    sibling: dict[str, object] = {"rfilename": name, "size": len(data), "blobId": _git_blob_id(data)}
    if name.endswith(_LFS_SUFFIXES):
        sibling["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
    return sibling


class TestRegistry(_Served):
    """An Ollama-style registry with the models a test adds (``add_model``)."""

    __test__ = False

    def __init__(self) -> None:
        super().__init__()
        self.manifests: dict[tuple[str, str], bytes] = {}
        self.blobs: dict[str, bytes] = {}

    def add_model(self, name: str, tag: str, gguf: bytes, *, template: str = "", params: str = "") -> str:
        """Add ``name:tag`` (``library/x``) with a GGUF model layer and template/params layers."""
        layers = [("application/vnd.ollama.image.model", gguf)]
        if template:
            layers.append(("application/vnd.ollama.image.template", template.encode()))
        if params:
            layers.append(("application/vnd.ollama.image.params", params.encode()))
        config = json.dumps({"model_format": "gguf"}).encode()
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": self._layer("application/vnd.docker.container.image.v1+json", config),
            "layers": [self._layer(media, data) for media, data in layers],
        }
        self.manifests[(name, tag)] = json.dumps(manifest).encode()
        return manifest["layers"][0]["digest"]  # type: ignore[index, no-any-return]

    def _layer(self, media_type: str, data: bytes) -> dict[str, object]:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        self.blobs[digest] = data
        return {"mediaType": media_type, "digest": digest, "size": len(data)}

    def app(self) -> Starlette:
        """The ASGI app."""
        return Starlette(
            routes=[
                Route("/v2/{namespace}/{name}/manifests/{tag}", self._manifest, methods=["GET"]),
                Route("/v2/{namespace}/{name}/blobs/{digest}", self._blob, methods=["GET", "HEAD"]),
            ]
        )

    async def _manifest(self, request: Request) -> Response:
        key = (
            f"{request.path_params['namespace']}/{request.path_params['name']}",
            request.path_params["tag"],
        )
        lied = self.lie(b'{"schemaVersion": 2, "layers": [')
        if lied is not None:
            return lied
        manifest = self.manifests.get(key)
        if manifest is None:
            return JSONResponse({"errors": [{"code": "MANIFEST_UNKNOWN"}]}, status_code=404)
        return Response(manifest, media_type="application/vnd.docker.distribution.manifest.v2+json")

    async def _blob(self, request: Request) -> Response:
        digest = request.path_params["digest"]
        data = self.blobs.get(digest)
        if data is None:
            return JSONResponse({"errors": [{"code": "BLOB_UNKNOWN"}]}, status_code=404)
        return self.body(request, digest, data, {"Docker-Content-Digest": digest})


REPO: Final = "mirbad/tiny"
"""The public repository :func:`loopback_sources` serves: config.json, weights/tiny.gguf, README.md."""
PRIVATE_REPO: Final = "mirbad/private"
"""A private repository (config.json only) that needs :attr:`TestHub.token`."""
CONFIG: Final = b'{"architectures": ["LlamaForCausalLM"]}'
"""The config.json of both repositories."""
TEMPLATE: Final = "{{ .Prompt }}"
PARAMS: Final = '{"stop": []}'


@dataclass
class Sources:
    """The loopback hub and registry of one test, their base URLs and what they serve."""

    hub: TestHub
    registry: TestRegistry
    hub_url: str
    registry_url: str
    gguf: bytes
    commit: str


@asynccontextmanager
async def loopback_sources(gguf: bytes) -> AsyncIterator[Sources]:
    """Serve a hub with :data:`REPO` and :data:`PRIVATE_REPO` and a registry with ``library/tiny:latest``.

    Any hold a test set is released on the way out, so the servers can stop.
    """
    hub, registry = TestHub(), TestRegistry()
    commit = hub.add_repo(REPO, {"config.json": CONFIG, "weights/tiny.gguf": gguf, "README.md": b"hi"})
    hub.add_repo(PRIVATE_REPO, {"config.json": CONFIG}, private=True)
    registry.add_model("library/tiny", "latest", gguf, template=TEMPLATE, params=PARAMS)
    async with serve_asgi(hub.app()) as hub_url, serve_asgi(registry.app()) as registry_url:
        try:
            yield Sources(hub, registry, hub_url, registry_url, gguf, commit)
        finally:
            for served in (hub, registry):
                if served.hold is not None:
                    served.hold.release()


@dataclass
class Silent:
    """A loopback source that accepts connections and never answers, and how many it accepted."""

    url: str
    connections: int = 0


@asynccontextmanager
async def silent_endpoint() -> AsyncIterator[Silent]:
    """Serve :class:`Silent` until the block ends (then every held connection is closed)."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    silent = Silent(f"http://127.0.0.1:{listener.extra(SocketAttribute.local_port)}")

    async def hold(stream: SocketStream) -> None:
        silent.connections += 1
        async with stream:
            with anyio.move_on_after(HOLD_TIMEOUT_S), suppress(anyio.EndOfStream, anyio.BrokenResourceError):
                while True:
                    await stream.receive()  # read and ignore the request, answer nothing

    async with listener, anyio.create_task_group() as group:
        group.start_soon(listener.serve, hold)
        try:
            yield silent
        finally:
            group.cancel_scope.cancel()


def refused_endpoint() -> str:
    """A loopback URL where nothing listens (a connection is refused)."""
    return f"http://127.0.0.1:{free_port()}"
