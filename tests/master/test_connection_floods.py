"""Floods before authentication, against a guarded server in a child process with few descriptors.

Half-open TLS handshakes and bodies trickled a byte at a time, in waves larger than the descriptor
limit, must leave ``/healthz`` and ``/v1`` answering every probe, and the server's memory must come back
near its baseline once a wave is gone. The child runs the master's own serving code (mutual TLS, as the
agent and the enroll listener serve it) with a lowered ``RLIMIT_NOFILE``, so a wave of a few hundred
sockets stands for the 20,000 of a real attack; its RSS is read from ``/proc``. A flood of its side
listener (the enroll listener's stand-in, with that one's limit) must not reach the main port either.
Counts are parameters, every wait has a bound, and nothing asserts a speed.
"""

from __future__ import annotations

import contextlib
import json
import resource
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

import pytest
from tests._support.polling import until
from tests.orchestration._fleet_pki import FleetPki

from mirbad_protocol.pki import TlsCredentials

NOFILE: Final = 512  # the child's descriptor limit: its default connection limit is then 128
WAVE: Final = 600  # sockets per wave: more than the child has descriptors
WAVES: Final = 3
PROBES: Final = 10  # /healthz and /v1 requests during each wave
RSS_MARGIN_KIB: Final = {
    # uvloop, the loop the master and the agent run on: back near the baseline (allocator slack).
    "fast": 24 * 1024,
    # asyncio's fallback gives every TLS connection a 256 KiB buffer that glibc keeps once freed: the
    # memory is bounded by the connection limit (a few MiB per wave here), not given back.
    "asyncio": 96 * 1024,
}
WAIT_S: Final = 20.0
# Short deadlines, so that a wave is over within seconds (the defaults are documented in docs/api.md).
LIMITS: Final = {"handshake_timeout_s": 1.0, "header_timeout_s": 2.0, "body_grace_s": 1.0}

pytestmark = pytest.mark.skipif(
    resource.getrlimit(resource.RLIMIT_NOFILE)[0] < WAVE + 200 or not Path("/proc/self/status").exists(),
    reason="the test process needs descriptors and /proc",
)


@contextmanager
def child_server(
    credentials: Path | None, loop: str, log: Path
) -> Iterator[tuple[tuple[int, int], subprocess.Popen[str]]]:
    """The child's main and side ports; its log goes to ``log`` (a full pipe nobody reads stalls it)."""
    command = [
        sys.executable,
        "-m",
        "tests.master._flood_server_child",
        str(NOFILE),
        loop,
        str(credentials) if credentials else "-",
        json.dumps(LIMITS),
    ]
    with log.open("w") as errors:
        child = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, text=True
        )
    try:
        assert child.stdout is not None
        main, side = child.stdout.readline().split()
        yield (int(main), int(side)), child
    finally:
        if child.poll() is None:
            child.kill()
        child.communicate(timeout=WAIT_S)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def client_hello() -> bytes:
    """A real ClientHello: the server answers it and then waits for a client that never goes on."""
    context = ssl.create_default_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def open_wave(port: int, first_bytes: bytes, count: int = WAVE) -> list[socket.socket]:
    opened = []
    for _ in range(count):
        # A connection the full listen queue refused, or one the server already let go, is fine.
        with contextlib.suppress(OSError):
            client = socket.create_connection(("127.0.0.1", port), timeout=1)
            opened.append(client)
            client.sendall(first_bytes)
    return opened


def close_all(sockets: list[socket.socket]) -> None:
    for each in sockets:
        each.close()


def ask(port: int, context: ssl.SSLContext | None, request: bytes) -> bytes:
    """The status line of ``request``'s answer, or what went wrong."""
    try:
        with contextlib.ExitStack() as opened:
            raw = opened.enter_context(socket.create_connection(("127.0.0.1", port), timeout=5))
            stream = (
                opened.enter_context(context.wrap_socket(raw, server_hostname="127.0.0.1"))
                if context
                else raw
            )
            stream.sendall(request)
            answer = b""
            while b"\r\n" not in answer and (chunk := stream.recv(4096)):
                answer += chunk
            return answer.split(b"\r\n", 1)[0]
    except OSError as exc:
        return repr(exc).encode()


HEALTHZ: Final = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
V1: Final = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
)


def probes(port: int, context: ssl.SSLContext | None) -> list[bytes]:
    return [ask(port, context, request) for _ in range(PROBES) for request in (HEALTHZ, V1)]


@pytest.fixture
def credentials(tmp_path: Path) -> tuple[Path, TlsCredentials]:
    pki = FleetPki.create()
    pki.agent("node-1").save(tmp_path, "agent")
    return tmp_path, pki.master()


@pytest.mark.parametrize(("loop", "flooded"), [("asyncio", "main"), ("fast", "main"), ("fast", "side")])
def test_waves_of_half_open_handshakes_leave_healthz_and_v1_answering_and_memory_at_baseline(
    credentials: tuple[Path, TlsCredentials], loop: str, flooded: str
) -> None:
    # Before, asyncio did each handshake outside the guard and held it 60 s: a wave larger than the
    # descriptor limit took every descriptor (no probe answered) and the TLS buffers stayed.
    folder, master = credentials
    context = master.client_context()
    with child_server(folder, loop, folder / "child.log") as ((port, side), child):
        assert probes(port, context) == [b"HTTP/1.1 200 OK"] * (2 * PROBES)
        baseline = rss_kib(child.pid)
        answered = []
        for _ in range(WAVES):
            wave = open_wave(port if flooded == "main" else side, client_hello())
            try:
                answered += probes(port, context)
            finally:
                close_all(wave)

        assert answered == [b"HTTP/1.1 200 OK"] * (2 * PROBES * WAVES)
        until(
            lambda: rss_kib(child.pid) <= baseline + RSS_MARGIN_KIB[loop],
            lambda: f"RSS {rss_kib(child.pid)} KiB, baseline {baseline} KiB",
            timeout_s=WAIT_S,
        )


def test_waves_of_trickled_bodies_leave_healthz_and_v1_answering(tmp_path: Path) -> None:
    # Before, a connection receiving its body was never evicted and only a pause bounded it: bodies
    # trickled a byte at a time held every connection the limit allows, and the probes were refused.
    header = (
        b"POST /api/session HTTP/1.1\r\nHost: x\r\n"
        b"Content-Type: application/json\r\nContent-Length: 4096\r\n\r\n{"
    )
    with child_server(None, "fast", tmp_path / "child.log") as ((port, _side), child):
        answered = []
        for _ in range(WAVES):
            wave = open_wave(port, header)
            try:
                for trickle in range(2):
                    for each in wave:
                        with contextlib.suppress(OSError):
                            each.send(b" ")
                    answered += probes(port, None)
                    time.sleep(0.2 * trickle)
            finally:
                close_all(wave)

        assert answered == [b"HTTP/1.1 200 OK"] * (2 * PROBES * 2 * WAVES)
        assert child.poll() is None
