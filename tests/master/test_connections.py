"""The master's socket guards, against a real uvicorn server on a free loopback port.

Stalled headers and bodies are closed, a flood of idle sockets cannot keep ``/healthz`` out, HTTP/1.0
gets no chunked encoding, and failed accepts are reported at most once per interval. Since issue 31:
oversized headers get 431, a body trickled below the minimum rate is cut and the slowest body makes
room at the limit, an address past its share makes room itself, and TLS handshakes count against the
limit, time out and are capped (the floods themselves are in ``test_connection_floods.py``). Each wait has a
bound; no test asserts how long anything took.
"""

from __future__ import annotations

import contextlib
import logging
import resource
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager, contextmanager
from typing import Final

import anyio
import httpx
import pytest
from anyio.abc import SocketStream
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route
from tests._support.master_server import serve_master_server
from tests._support.monotonic import FakeMonotonic
from tests.orchestration._fleet_pki import FleetPki

from mirbad_router import AcceptErrorLog, ConnectionLimits

pytestmark = pytest.mark.anyio

WAIT_S = 10.0  # the bound on every wait: far above the timeouts under test


async def healthz(_request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def upload(request: Request) -> Response:
    return PlainTextResponse(str(len(await request.body())))


async def stream(_request: Request) -> Response:
    async def pieces() -> AsyncIterator[bytes]:
        for piece in (b"one ", b"two ", b"three"):
            yield piece

    return StreamingResponse(pieces(), media_type="text/plain")


APP = Starlette(
    routes=[
        Route("/healthz", healthz),
        Route("/upload", upload, methods=["POST"]),
        Route("/stream", stream),
    ]
)


def serving(limits: ConnectionLimits) -> AbstractAsyncContextManager[tuple[str, int]]:
    return serve_master_server(APP, limits=limits)


async def closed_by_server(stream: SocketStream) -> bool:
    """Read until the server closes the connection (True) or the bound passes (False)."""
    with anyio.move_on_after(WAIT_S):
        try:
            while await stream.receive():
                pass
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return True
    return False


async def read_all(stream: SocketStream) -> bytes:
    received = b""
    with anyio.fail_after(WAIT_S):
        try:
            while True:
                received += await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return received


async def test_half_a_header_then_silence_is_closed() -> None:
    async with (
        serving(ConnectionLimits(header_timeout_s=0.2)) as (host, port),
        await anyio.connect_tcp(host, port) as stalled,
    ):
        await stalled.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        assert await closed_by_server(stalled)


async def test_a_connection_that_sends_nothing_is_closed() -> None:
    async with (
        serving(ConnectionLimits(header_timeout_s=0.2)) as (host, port),
        await anyio.connect_tcp(host, port) as silent,
    ):
        assert await closed_by_server(silent)


async def test_the_header_deadline_also_holds_for_the_next_request_on_a_kept_alive_connection() -> None:
    async with (
        serving(ConnectionLimits(header_timeout_s=0.5)) as (host, port),
        await anyio.connect_tcp(host, port) as client,
    ):
        await client.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        with anyio.fail_after(WAIT_S):
            assert b"200 OK" in await client.receive()
        await client.send(b"GET /healthz HTTP/1.1\r\nHo")
        assert await closed_by_server(client)


async def test_a_body_that_stops_arriving_is_closed() -> None:
    async with (
        serving(ConnectionLimits(body_timeout_s=0.2)) as (host, port),
        await anyio.connect_tcp(host, port) as stalled,
    ):
        await stalled.send(b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
        assert await closed_by_server(stalled)


async def test_a_body_arriving_piece_by_piece_is_read_to_the_end() -> None:
    # Every pause is far below the body timeout, the whole upload far above it would matter if it were
    # a total deadline: the timeout is per pause.
    async with (
        serving(ConnectionLimits(body_timeout_s=WAIT_S)) as (host, port),
        await anyio.connect_tcp(host, port) as client,
    ):
        await client.send(
            b"POST /upload HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 50\r\n\r\n"
        )
        for _ in range(5):
            await anyio.sleep(0.05)
            await client.send(b"0123456789")
        answer = await read_all(client)

    assert answer.startswith(b"HTTP/1.1 200")
    assert answer.endswith(b"\r\n\r\n50")


async def test_idle_sockets_beyond_the_limit_do_not_keep_healthz_out() -> None:
    limits = ConnectionLimits(header_timeout_s=WAIT_S * 3, max_connections=8)
    async with serving(limits) as (host, port):
        idle = [await anyio.connect_tcp(host, port) for _ in range(40)]
        for index, socket in enumerate(idle):
            if index % 2:
                await socket.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # half a header
        try:
            async with httpx.AsyncClient(base_url=f"http://{host}:{port}", timeout=WAIT_S) as client:
                answers = [await client.get("/healthz") for _ in range(3)]
            oldest_closed = await closed_by_server(idle[0])
        finally:
            for socket in idle:
                await socket.aclose()

    assert [answer.json() for answer in answers] == [{"status": "ok"}] * 3
    assert oldest_closed  # the longest-idle one made room


async def test_pipelined_requests_are_all_answered() -> None:
    async with (
        serving(ConnectionLimits(header_timeout_s=WAIT_S, max_connections=16)) as (host, port),
        await anyio.connect_tcp(host, port) as client,
    ):
        request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        await client.send(request * 3 + b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answers = await read_all(client)

    assert answers.count(b"HTTP/1.1 200 OK") == 4


async def test_http_1_0_gets_the_body_without_chunked_encoding_then_the_close() -> None:
    async with serving(ConnectionLimits()) as (host, port):
        async with await anyio.connect_tcp(host, port) as client:
            await client.send(b"GET /stream HTTP/1.0\r\n\r\n")
            streamed = await read_all(client)
        async with await anyio.connect_tcp(host, port) as client:
            await client.send(b"GET /healthz HTTP/1.0\r\n\r\n")
            sized = await read_all(client)

    head, _, body = streamed.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert b"transfer-encoding" not in head.lower()
    assert b"connection: close" in head.lower()
    assert body == b"one two three"
    head, _, body = sized.partition(b"\r\n\r\n")
    assert b"content-length: 15" in head.lower()
    assert body == b'{"status":"ok"}'


async def test_http_1_1_still_streams_chunked() -> None:
    async with (
        serving(ConnectionLimits()) as (host, port),
        await anyio.connect_tcp(host, port) as client,
    ):
        await client.send(b"GET /stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        streamed = await read_all(client)

    assert b"transfer-encoding: chunked" in streamed.lower()


# ---------------------------------------------------------------- descriptors, in a child process

CHILD_NOFILE = 512  # the default limit is then 128 connections
FLOOD = 600


@contextmanager
def child_server(max_connections: int, loop: str = "asyncio") -> Iterator[tuple[int, subprocess.Popen[str]]]:
    """The guarded server in a child process whose descriptor limit is :data:`CHILD_NOFILE`."""
    command = [
        sys.executable,
        "-m",
        "tests.master._guarded_server_child",
        str(CHILD_NOFILE),
        str(max_connections),
        loop,
    ]
    child = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        yield int(child.stdout.readline()), child
    finally:
        if child.poll() is None:
            child.kill()
        child.communicate(timeout=WAIT_S)


def flood(port: int) -> list[socket.socket]:
    """Open :data:`FLOOD` idle connections (those the kernel queue takes)."""
    opened = []
    for _ in range(FLOOD):
        # A connection the full listen queue refused uses nothing of the server's.
        with contextlib.suppress(OSError):
            opened.append(socket.create_connection(("127.0.0.1", port), timeout=1))
    return opened


def healthz_over(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as probe:
        probe.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        return probe.recv(64)


def stop(child: subprocess.Popen[str]) -> str:
    _out, err = child.communicate("", timeout=WAIT_S)
    return err


needs_descriptors = pytest.mark.skipif(
    resource.getrlimit(resource.RLIMIT_NOFILE)[0] < FLOOD + 200, reason="the test process needs descriptors"
)


@needs_descriptors
def test_a_flood_of_idle_sockets_leaves_descriptors_and_healthz_answering() -> None:
    with child_server(0) as (port, child):
        sockets = flood(port)
        try:
            answer = healthz_over(port)
        finally:
            for each in sockets:
                each.close()
        log = stop(child)

    assert answer.startswith(b"HTTP/1.1 200")
    assert "cannot accept" not in log


@needs_descriptors
def test_accept_errors_past_the_descriptor_limit_are_logged_once_not_per_attempt() -> None:
    with child_server(4 * CHILD_NOFILE) as (port, child):  # a limit above the descriptors: misconfigured
        sockets = flood(port)
        time.sleep(2.5)  # asyncio retries a failed accept after a second: let it fail a few times
        for each in sockets:
            each.close()
        log = stop(child)

    assert log.count("cannot accept connections") == 1
    assert "Traceback" not in log
    assert len(log) < 2000


@needs_descriptors
def test_on_uvloop_accept_errors_shed_the_waiting_connections_without_a_flood() -> None:
    # libuv keeps a spare descriptor of its own and sheds the queue on EMFILE (no exception context
    # reaches the handler, so nothing is reported); what matters holds: no flood, the server recovers.
    pytest.importorskip("uvloop")
    with child_server(4 * CHILD_NOFILE, "fast") as (port, child):
        sockets = flood(port)
        time.sleep(2.5)
        for each in sockets:
            each.close()
        time.sleep(0.5)  # the server closes its side of the shed connections
        answer = healthz_over(port)
        log = stop(child)

    assert answer.startswith(b"HTTP/1.1 200")
    assert "Traceback" not in log
    assert len(log) < 2000


class Loop:
    """The part of an event loop the handler calls for contexts it does not handle."""

    def __init__(self) -> None:
        self.passed: list[dict[str, object]] = []

    def default_exception_handler(self, context: dict[str, object]) -> None:
        self.passed.append(context)


def test_failed_accepts_are_reported_once_per_interval_with_a_count(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeMonotonic(100.0)
    handler = AcceptErrorLog(None, interval_s=10.0, clock=clock)
    loop = Loop()
    failure = {
        "message": "socket.accept() out of system resource",
        "exception": OSError(24, "Too many open files"),
    }

    with caplog.at_level(logging.ERROR, logger="mirbad_router.serving"):
        for _ in range(10_000):
            handler(loop, failure)  # type: ignore[arg-type]
        clock.now += 10.0
        handler(loop, failure)  # type: ignore[arg-type]
        handler(loop, {"message": "something else"})  # type: ignore[arg-type]

    reports = [record.getMessage() for record in caplog.records]
    assert len(reports) == 2
    assert "Too many open files" in reports[0]
    assert "(10000 time(s)" in reports[1]
    assert all(record.exc_info is None for record in caplog.records)
    assert loop.passed == [{"message": "something else"}]


_DROPPED: Final = 50  # pieces the app sends after its client has gone


def _sends_after_the_client_left(ready: threading.Event, gone: threading.Event) -> Starlette:
    async def app_stream(_request: Request) -> Response:
        async def pieces() -> AsyncIterator[bytes]:
            yield b"first "
            ready.set()
            # Blocks the loop on purpose, so the connection's reset is not read before the next writes:
            # what a busy master sees when a client drops a stream. Bounded.
            gone.wait(WAIT_S)
            for _ in range(_DROPPED):
                yield b"more "

        return StreamingResponse(pieces(), media_type="text/plain")

    return Starlette(routes=[Route("/stream", app_stream)])


async def test_a_stream_whose_client_left_is_not_written_again(caplog: pytest.LogCaptureFixture) -> None:
    # Issue 16: after clients dropped streams, asyncio logged "socket.send() raised exception." for every
    # piece still written to the dead socket (25,460 lines in one master's log).
    ready, gone = threading.Event(), threading.Event()

    def drop_the_stream(host: str, port: int) -> bytes:
        # In a thread: the app blocks the event loop until this client is gone.
        with socket.create_connection((host, port), timeout=WAIT_S) as client:
            client.sendall(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
            first = b""
            while b"first" not in first and (piece := client.recv(4096)):
                first += piece
            ready.wait(WAIT_S)
            # A reset, not a polite close: the next write fails at once.
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        gone.set()
        return first

    with caplog.at_level(logging.WARNING, logger="asyncio"):
        async with serve_master_server(_sends_after_the_client_left(ready, gone)) as (host, port):
            first = await anyio.to_thread.run_sync(drop_the_stream, host, port)
            await anyio.sleep(0.5)  # lets the stream's task run to its end; nothing is timed
    assert b"first" in first
    floods = [record for record in caplog.records if "socket.send() raised exception" in record.getMessage()]
    assert floods == []


# ---------------------------------------------------------------- header size (issue 31, item 3)


@pytest.mark.parametrize("pieces", [1, 40])
async def test_a_header_past_the_bound_is_answered_431(pieces: int) -> None:
    # Before, any header size was read whole and answered 200 (a 64 MB one included).
    field = b"X-Big: " + b"a" * 4096 + b"\r\n"
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + field * 20 + b"\r\n"
    async with (
        serving(ConnectionLimits(max_header_bytes=64 * 1024)) as (host, port),
        await anyio.connect_tcp(host, port) as client,
    ):
        size = -(-len(request) // pieces)
        with contextlib.suppress(anyio.BrokenResourceError):
            for start in range(0, len(request), size):
                await client.send(request[start : start + size])
        answer = await read_all(client)

    assert answer.startswith(b"HTTP/1.1 431 ")


async def test_a_header_that_never_ends_is_answered_431_before_the_header_deadline() -> None:
    async with (
        serving(ConnectionLimits(header_timeout_s=WAIT_S * 3, max_header_bytes=16 * 1024)) as (host, port),
        await anyio.connect_tcp(host, port) as client,
    ):
        await client.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Endless: ")
        with contextlib.suppress(anyio.BrokenResourceError):
            for _ in range(64):
                await client.send(b"a" * 1024)
        answer = await read_all(client)

    assert answer.startswith(b"HTTP/1.1 431 ")


async def test_a_header_within_the_bound_is_answered() -> None:
    request = (
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: " + b"a" * 60_000 + b"\r\n\r\n"
    )
    async with serving(ConnectionLimits()) as (host, port), await anyio.connect_tcp(host, port) as client:
        await client.send(request)
        assert (await read_all(client)).startswith(b"HTTP/1.1 200 ")


# ---------------------------------------------------------------- slow bodies (issue 31, item 2)


async def test_a_body_trickled_below_the_minimum_rate_is_cut_though_it_never_pauses_long() -> None:
    # Before, only a pause bounded a body: a byte every 50 ms kept it open for as long as it liked.
    limits = ConnectionLimits(body_timeout_s=WAIT_S, body_grace_s=0.3, body_min_rate=1000)
    async with serving(limits) as (host, port), await anyio.connect_tcp(host, port) as client:
        await client.send(b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 10000\r\n\r\n")
        with anyio.move_on_after(WAIT_S), contextlib.suppress(anyio.BrokenResourceError):
            while True:
                await client.send(b"x")
                await anyio.sleep(0.05)
        assert await closed_by_server(client)


async def test_at_the_limit_the_slowest_body_makes_room() -> None:
    # Before, a connection receiving its body was never evicted: bodies held the limit.
    limits = ConnectionLimits(max_connections=8, body_grace_s=WAIT_S * 3, address_share=1.0)
    async with serving(limits) as (host, port):
        bodies = [await anyio.connect_tcp(host, port) for _ in range(8)]
        try:
            for body in bodies:
                await body.send(b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nx")
            async with httpx.AsyncClient(base_url=f"http://{host}:{port}", timeout=WAIT_S) as client:
                answers = [await client.get("/healthz") for _ in range(3)]
            evicted = [await closed_by_server(body) for body in bodies[:1]]
        finally:
            for body in bodies:
                await body.aclose()

    assert [answer.status_code for answer in answers] == [200, 200, 200]
    assert evicted == [True]


async def test_at_the_limit_an_address_past_its_share_makes_room_itself() -> None:
    # Before, the longest-idle connection went, whoever held it: one address flooding made the others'
    # connections go. (Linux answers on all of 127.0.0.0/8: two addresses on one machine.)
    limits = ConnectionLimits(header_timeout_s=WAIT_S * 3, max_connections=20, address_share=0.25)
    async with serving(limits) as (host, port):
        other = [await anyio.connect_tcp(host, port, local_host="127.0.0.2") for _ in range(5)]
        flood = [await anyio.connect_tcp(host, port, local_host=host) for _ in range(15)]
        try:
            await anyio.sleep(0.2)  # all twenty admitted: the limit is reached
            async with httpx.AsyncClient(base_url=f"http://{host}:{port}", timeout=WAIT_S) as client:
                assert (await client.get("/healthz")).status_code == 200
            flood_oldest_closed = await closed_by_server(flood[0])
            other_oldest_open = not await _closed_now(other[0])
        finally:
            for each in other + flood:
                await each.aclose()

    assert flood_oldest_closed
    assert other_oldest_open


async def _closed_now(stream: SocketStream) -> bool:
    with anyio.move_on_after(0.1):
        try:
            await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return True
    return False


# ---------------------------------------------------------------- TLS handshakes (issue 31, item 1)


@pytest.fixture
def tls() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """The agent's server context (mutual TLS) and the master's client context of one fleet."""
    pki = FleetPki.create()
    return pki.agent("node-1").server_context(), pki.master().client_context()


async def test_a_connection_silent_in_its_tls_handshake_is_closed_after_the_handshake_timeout(
    tls: tuple[ssl.SSLContext, ssl.SSLContext],
) -> None:
    # Before, asyncio held a handshake 60 s, outside every deadline of the guard.
    server_context, _client = tls
    limits = ConnectionLimits(handshake_timeout_s=0.2, header_timeout_s=WAIT_S * 3)
    async with (
        serve_master_server(APP, limits=limits, ssl_context=server_context) as (host, port),
        await anyio.connect_tcp(host, port) as silent,
    ):
        assert await closed_by_server(silent)


async def test_half_open_handshakes_count_against_the_limit_and_make_room_for_healthz(
    tls: tuple[ssl.SSLContext, ssl.SSLContext],
) -> None:
    server_context, client_context = tls
    limits = ConnectionLimits(
        handshake_timeout_s=WAIT_S * 3, max_connections=8, max_handshakes=64, address_share=1.0
    )
    async with serve_master_server(APP, limits=limits, ssl_context=server_context) as (host, port):
        half_open = [await anyio.connect_tcp(host, port) for _ in range(40)]
        try:
            async with httpx.AsyncClient(
                base_url=f"https://{host}:{port}", verify=client_context, timeout=WAIT_S
            ) as client:
                answers = [await client.get("/healthz") for _ in range(3)]
            oldest_closed = await closed_by_server(half_open[0])
        finally:
            for each in half_open:
                await each.aclose()

    assert [answer.status_code for answer in answers] == [200, 200, 200]
    assert oldest_closed


async def test_handshakes_beyond_the_cap_replace_the_oldest(
    tls: tuple[ssl.SSLContext, ssl.SSLContext],
) -> None:
    server_context, _client = tls
    limits = ConnectionLimits(
        handshake_timeout_s=WAIT_S * 3, max_connections=100, max_handshakes=4, address_share=1.0
    )
    async with serve_master_server(APP, limits=limits, ssl_context=server_context) as (host, port):
        half_open = [await anyio.connect_tcp(host, port) for _ in range(4)]
        await anyio.sleep(1.2)  # longer than an honest handshake takes: these may be replaced
        half_open += [await anyio.connect_tcp(host, port) for _ in range(4)]
        try:
            closed = [await closed_by_server(each) for each in half_open[:4]]
        finally:
            for each in half_open:
                await each.aclose()

    assert closed == [True] * 4


async def test_a_burst_of_honest_handshakes_past_the_cap_all_succeed(
    tls: tuple[ssl.SSLContext, ssl.SSLContext],
) -> None:
    # The master's hop opens its pool to an agent in a burst: the cap must not cut those handshakes.
    server_context, client_context = tls
    limits = ConnectionLimits(max_connections=100, max_handshakes=2, address_share=1.0)
    statuses: list[int] = []

    async def ask(base_url: str) -> None:
        async with httpx.AsyncClient(base_url=base_url, verify=client_context, timeout=WAIT_S) as client:
            statuses.append((await client.get("/healthz")).status_code)

    async with (
        serve_master_server(APP, limits=limits, ssl_context=server_context) as (host, port),
        anyio.create_task_group() as burst,
    ):
        for _ in range(16):
            burst.start_soon(ask, f"https://{host}:{port}")

    assert statuses == [200] * 16
