"""docker-py calls run off the event loop, each bounded by a timeout."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.to_thread

from .exceptions import MirbadRuntimeError, RuntimeUnavailableError

if TYPE_CHECKING:
    import docker
    from docker import DockerClient
else:
    from ._lazy_modules import docker  # imported at its first use: see the module

# The gateway is internal to the container driver; the probe is the agent's too (its start-up check).
__all__ = ["DEFAULT_DOCKER_SOCKET", "probe_docker_socket"]

DEFAULT_DOCKER_SOCKET = "unix:///var/run/docker.sock"
"""The endpoint docker-py (and the CLI) use when neither a URL nor ``DOCKER_HOST`` names one."""


def probe_docker_socket(base_url: str | None, timeout_s: float) -> None:
    """Connect to the Docker endpoint's unix socket and close the connection again (blocking).

    docker-py's unix connection leaves its socket unclosed when the connect fails (no dockerd, a
    socket file left behind): every such call would leak one until the garbage collector found it
    (a ``ResourceWarning``). Trying the socket first with one closed here turns that failure into a
    plain :class:`OSError` before docker-py opens anything. Other endpoints (``tcp://``, ``ssh://``)
    are left to docker-py.

    Args:
        base_url: the Docker endpoint; None reads ``DOCKER_HOST``, else :data:`DEFAULT_DOCKER_SOCKET`.
        timeout_s: the bound of the connect.

    Raises:
        OSError: the socket is missing, refuses or does not accept in time.
    """
    url = base_url or os.environ.get("DOCKER_HOST") or DEFAULT_DOCKER_SOCKET
    if not url.startswith("unix://") or not hasattr(socket, "AF_UNIX"):
        return
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(timeout_s)
        probe.connect(url.removeprefix("unix://"))


T = TypeVar("T")


class DockerGateway:
    """Owns one docker-py client and runs every call on a worker thread under a deadline.

    docker-py blocks, so each call goes to :func:`anyio.to_thread.run_sync`; when the deadline passes
    the thread is abandoned (it ends on docker-py's own HTTP timeout) and the caller gets
    :class:`RuntimeUnavailableError`, as it does when Docker cannot be reached or refuses a request
    the caller did not handle itself.

    Args:
        base_url: the Docker endpoint; ``None`` reads ``DOCKER_HOST`` and friends like the CLI does.
        timeout_s: the default deadline of a call and the client's HTTP timeout.
        client: an existing docker-py client to use instead of creating one (the gateway closes it).
    """

    def __init__(self, base_url: str | None, timeout_s: float, client: DockerClient | None = None) -> None:
        self._base_url = base_url
        self._timeout_s = timeout_s
        self._client = client
        self._client_lock = threading.Lock()
        # docker-py's own clients connect through its unix connection; a test's hand-written one does not.
        self._probes = client is None or type(client).__module__.split(".")[0] == "docker"

    async def call(
        self, what: str, work: Callable[[DockerClient], T], *, timeout_s: float | None = None
    ) -> T:
        """Run ``work(client)`` on a thread within ``timeout_s`` (default: the gateway's).

        Args:
            what: the action in words ("list containers"), used in error messages.
            work: receives the docker-py client; it may handle Docker's errors itself or raise a
                :class:`MirbadRuntimeError`, which passes through unchanged.
            timeout_s: this call's deadline in seconds.
        """
        deadline = self._timeout_s if timeout_s is None else timeout_s
        try:
            with anyio.fail_after(deadline):
                return await anyio.to_thread.run_sync(self._run, work, abandon_on_cancel=True)
        except TimeoutError:
            raise RuntimeUnavailableError(f"Docker did not {what} within {deadline:g} s") from None
        except MirbadRuntimeError:
            raise
        except (docker.errors.DockerException, OSError) as exc:
            raise RuntimeUnavailableError(f"Docker could not {what}: {_explain(exc)}") from exc

    async def aclose(self) -> None:
        """Close the client's connection pool."""
        with self._client_lock:
            client, self._client = self._client, None
        if client is not None:
            with anyio.move_on_after(self._timeout_s):
                await anyio.to_thread.run_sync(client.close, abandon_on_cancel=True)

    def _run(self, work: Callable[[DockerClient], T]) -> T:
        if self._probes:
            # A socket connect and close per call: what keeps docker-py from leaking one when it fails.
            probe_docker_socket(self._base_url, self._timeout_s)
        return work(self._connected())

    def _connected(self) -> Any:
        with self._client_lock:
            if self._client is None:
                # version="auto" asks the daemon once, so one agent works against old and new Docker.
                options: dict[str, Any] = {"version": "auto", "timeout": int(max(self._timeout_s, 1))}
                if self._base_url is None:
                    self._client = docker.from_env(**options)
                else:
                    self._client = docker.DockerClient(base_url=self._base_url, **options)
            return self._client


def _explain(exc: BaseException) -> str:
    explanation = getattr(exc, "explanation", None)
    return str(explanation or exc) or type(exc).__name__
