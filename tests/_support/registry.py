"""A stand-in container registry on loopback: the pull side of the Docker Registry HTTP API v2.

No public registry is reachable here, so image pulls are tested against this one. It serves one
image made for the occasion: a single gzip layer holding random bytes (so no dockerd has it already
and every pull really downloads) and its config, under ``127.0.0.1:<port>/<repository>:<tag>``.
dockerd treats 127.0.0.0/8 registries as insecure, so it speaks plain HTTP to it.

``hold()`` makes the next download of the layer stop halfway until ``release()``: a test can see a
pull in progress (and cancel it) without depending on how fast anything runs.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import platform
import tarfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Final

MANIFEST_TYPE: Final = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG_TYPE: Final = "application/vnd.docker.container.image.v1+json"
LAYER_TYPE: Final = "application/vnd.docker.image.rootfs.diff.tar.gzip"
HOLD_TIMEOUT_S: Final = 60.0
_SLICES: Final = 8
_SLICE_PAUSE_S: Final = 0.15
_ARCH: Final = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass
class StandInImage:
    """One image's blobs: a gzip layer of random bytes, its config and the manifest naming both."""

    layer: bytes
    config: bytes
    manifest: bytes

    @classmethod
    def random(cls, payload_bytes: int = 4 * 1024 * 1024) -> StandInImage:
        """An image whose one layer holds ``payload_bytes`` random bytes in ``/payload.bin``."""
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w") as tar:
            info = tarfile.TarInfo("payload.bin")
            info.size = payload_bytes
            tar.addfile(info, io.BytesIO(os.urandom(payload_bytes)))
        layer = gzip.compress(raw.getvalue(), compresslevel=1)
        config = json.dumps(
            {
                "architecture": _ARCH.get(platform.machine(), "amd64"),
                "os": "linux",
                "config": {},
                "rootfs": {"type": "layers", "diff_ids": [_digest(raw.getvalue())]},
            }
        ).encode()
        manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": MANIFEST_TYPE,
                "config": {"mediaType": CONFIG_TYPE, "size": len(config), "digest": _digest(config)},
                "layers": [{"mediaType": LAYER_TYPE, "size": len(layer), "digest": _digest(layer)}],
            }
        ).encode()
        return cls(layer=layer, config=config, manifest=manifest)


@dataclass
class StandInRegistry:
    """The registry's state: the image it serves and the hold on the layer's download."""

    repository: str
    tag: str
    image: StandInImage
    port: int = 0
    _held: threading.Event = field(default_factory=threading.Event)
    _released: threading.Event = field(default_factory=threading.Event)
    halfway: threading.Event = field(default_factory=threading.Event)
    """Set once a held download has sent its first half."""

    @property
    def reference(self) -> str:
        """What ``docker pull`` takes: ``127.0.0.1:<port>/<repository>:<tag>``."""
        return f"127.0.0.1:{self.port}/{self.repository}:{self.tag}"

    def hold(self) -> None:
        """Make the next layer download stop halfway until :meth:`release`."""
        self._released.clear()
        self.halfway.clear()
        self._held.set()

    def release(self) -> None:
        """Let a held download go on (and every later one run straight through)."""
        self._held.clear()
        self._released.set()

    def blob(self, digest: str) -> bytes | None:
        """The layer or the config by its digest (None for any other)."""
        blobs = {_digest(self.image.layer): self.image.layer, _digest(self.image.config): self.image.config}
        return blobs.get(digest)


def _handler(registry: StandInRegistry) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass  # dockerd's requests are no test output

        def do_HEAD(self) -> None:
            self._answer(body=False)

        def do_GET(self) -> None:
            self._answer(body=True)

        def _answer(self, *, body: bool) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/v2/":
                return self._send(200, b"{}", "application/json", body=body)
            prefix = f"/v2/{registry.repository}/"
            manifest_digest = _digest(registry.image.manifest)
            if path in (prefix + f"manifests/{registry.tag}", prefix + f"manifests/{manifest_digest}"):
                manifest = registry.image.manifest
                return self._send(200, manifest, MANIFEST_TYPE, body=body, digest=manifest_digest)
            if path.startswith(prefix + "blobs/"):
                digest = path.removeprefix(prefix + "blobs/")
                data = registry.blob(digest)
                if data is not None:
                    held = digest == _digest(registry.image.layer) and registry._held.is_set()
                    kind = "application/octet-stream"
                    return self._send(200, data, kind, body=body, digest=digest, held=held)
            error = {"errors": [{"code": "NAME_UNKNOWN", "message": f"nothing at {path}"}]}
            return self._send(404, json.dumps(error).encode(), "application/json", body=body)

        def _send(
            self,
            status: int,
            data: bytes,
            kind: str,
            *,
            body: bool,
            digest: str | None = None,
            held: bool = False,
        ) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Docker-Distribution-API-Version", "registry/2.0")
            if digest is not None:
                self.send_header("Docker-Content-Digest", digest)
            self.end_headers()
            if not body:
                return
            with contextlib.suppress(OSError):  # dockerd hung up (a cancelled pull)
                if held:
                    half = len(data) // 2
                    # In slices with pauses: dockerd reports a layer's progress at most every few
                    # hundred milliseconds, so one burst would show as its first 64 KiB only.
                    for start in range(0, half, half // _SLICES + 1):
                        self.wfile.write(data[start : min(start + half // _SLICES + 1, half)])
                        self.wfile.flush()
                        time.sleep(_SLICE_PAUSE_S)
                    registry.halfway.set()
                    registry._released.wait(HOLD_TIMEOUT_S)
                    data = data[half:]
                self.wfile.write(data)
                self.wfile.flush()

    return Handler


@contextlib.contextmanager
def running_registry(
    repository: str, tag: str, image: StandInImage | None = None
) -> Iterator[StandInRegistry]:
    """Serve ``repository:tag`` (a fresh random image unless given) on a free loopback port."""
    registry = StandInRegistry(repository, tag, image or StandInImage.random())
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(registry))
    server.daemon_threads = True
    registry.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, name="stand-in-registry", daemon=True)
    thread.start()
    try:
        yield registry
    finally:
        registry.release()
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
