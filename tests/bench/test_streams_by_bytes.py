"""Streamed points count the streams read by bytes, so a proxy too slow to finish one still scores.

LiteLLM's streamed row read 0 events with 0 errors: 64 streams of 200 events took it longer than the
window, so wrk finished none of them although the proxy relayed events all along. wrk counts every byte
it reads; the harness divides that by one whole stream's bytes, measured on a real loopback server.
"""

from __future__ import annotations

import math
import socket
import threading
from collections.abc import Iterator

import pytest
from bench.router._load import PointResult
from bench.router._targets import per_event_us
from bench.router._wrk import response_bytes

RESPONSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    + b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in [b"data: {}\n\n"] * 5)
    + b"0\r\n\r\n"
)


@pytest.fixture
def server() -> Iterator[tuple[int, list[bytes]]]:
    """A loopback server that answers one request with RESPONSE and keeps what it was sent."""
    listener = socket.create_server(("127.0.0.1", 0))
    received: list[bytes] = []

    def serve() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.settimeout(10)
            request = b""
            while b"\r\n\r\n" not in request or not request.endswith(b"{}"):
                request += connection.recv(4096)
            received.append(request)
            connection.sendall(RESPONSE)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1], received
    thread.join(timeout=10)
    listener.close()


def test_response_bytes_counts_the_raw_response_as_wrk_does(server: tuple[int, list[bytes]]) -> None:
    port, received = server
    assert response_bytes(f"http://127.0.0.1:{port}/v1/chat", b"{}", {"Authorization": "Bearer k"}) == len(
        RESPONSE
    )
    assert received[0].startswith(b"POST /v1/chat HTTP/1.1\r\n")
    assert b"Authorization: Bearer k\r\n" in received[0]


def point(requests: int, streams_read: float | None) -> PointResult:
    return PointResult(
        path="litellm",
        concurrency=64,
        duration_s=5.0,
        requests=requests,
        errors=0,
        p50_ms=math.nan,
        p99_ms=math.nan,
        cpu_s={"litellm": 2.0},
        machine_busy=0.5,
        agent_connections_closed=0,
        generator="wrk",
        streams_read=streams_read,
    )


def test_streams_still_arriving_when_the_window_closes_count_by_their_share() -> None:
    slow = point(requests=0, streams_read=40.0)  # 64 streams, none finished, each 5/8 read
    assert slow.rps == 8.0
    assert per_event_us(slow, "litellm", 200) == 2.0 * 1e6 / (40 * 200)


def test_points_without_a_byte_count_count_whole_responses() -> None:
    assert point(requests=10, streams_read=None).rps == 2.0
