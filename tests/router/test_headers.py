"""Hop-by-hop header filtering of the proxy core."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mirbad_router import HOP_BY_HOP_HEADERS, request_headers, response_headers

NAMES = st.sampled_from(
    [
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "proxy-authorization",
        "proxy-connection",
        "host",
        "content-length",
        "expect",
        "date",
        "server",
        "authorization",
        "content-type",
        "x-private",
        "x-kept",
        "accept",
    ]
)
VALUES = st.sampled_from(["1", "close", "x-private", "Keep-Alive, X-Private", "chunked", "a, b"])
HEADERS = st.lists(st.tuples(NAMES, VALUES), max_size=12)


def raw(headers: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    return [(name.title().encode(), value.encode()) for name, value in headers]


def named_by_connection(headers: list[tuple[str, str]]) -> set[str]:
    return {
        token.strip().lower() for name, value in headers if name == "connection" for token in value.split(",")
    }


def never_forwarded(name: str, headers: list[tuple[str, str]]) -> bool:
    return name in HOP_BY_HOP_HEADERS or name.startswith("proxy-") or name in named_by_connection(headers)


@given(HEADERS)
def test_request_headers_keep_exactly_the_end_to_end_ones_in_order(headers: list[tuple[str, str]]) -> None:
    kept = [(name.decode(), value.decode()) for name, value in request_headers(raw(headers))]

    expected = [
        (name, value)
        for name, value in headers
        if not never_forwarded(name, headers) and name not in {"host", "content-length", "expect"}
    ]
    assert kept == expected


@given(HEADERS)
def test_response_headers_keep_exactly_the_end_to_end_ones_in_order(headers: list[tuple[str, str]]) -> None:
    kept = [(name.decode(), value.decode()) for name, value in response_headers(raw(headers))]

    expected = [
        (name, value)
        for name, value in headers
        if not never_forwarded(name, headers) and name not in {"date", "server"}
    ]
    assert kept == expected


@given(HEADERS, st.sampled_from(["Authorization", "authorization", "X-Kept"]))
def test_an_added_header_replaces_every_client_header_of_that_name(
    headers: list[tuple[str, str]], added: str
) -> None:
    result = request_headers(raw(headers), {added: "Bearer instance"})

    same_name = [value for name, value in result if name == added.lower().encode()]
    assert same_name == [b"Bearer instance"]
    assert result[-1] == (added.lower().encode(), b"Bearer instance")


def test_upstream_framing_headers_never_reach_the_client() -> None:
    upstream = [
        (b"Transfer-Encoding", b"chunked"),
        (b"Connection", b"keep-alive, X-Hop"),
        (b"X-Hop", b"1"),
        (b"Content-Type", b"text/event-stream"),
    ]

    assert response_headers(upstream) == [(b"content-type", b"text/event-stream")]
