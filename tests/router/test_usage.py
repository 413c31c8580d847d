"""Usage read from JSON bodies and server-sent-event streams as they pass."""

from __future__ import annotations

import itertools
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from mirbad_router import JsonUsageTap, SseUsageTap, Usage, request_stream_usage, usage_from_object


def _event(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


CONTENT = [_event({"choices": [{"index": 0, "delta": {"content": word}}]}) for word in ("a", "b", "c")]
FINISH = _event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
USAGE_ONLY = _event(
    {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}}
)
DONE = b"data: [DONE]\n\n"
STREAM = b"".join([*CONTENT, FINISH, USAGE_ONLY, DONE])


def test_usage_from_chat_completion_embeddings_and_responses() -> None:
    assert usage_from_object({"usage": {"prompt_tokens": 5, "completion_tokens": 2}}) == Usage(5, 2)
    assert usage_from_object({"usage": {"prompt_tokens": 5, "total_tokens": 5}}) == Usage(5, 0)
    assert usage_from_object({"response": {"usage": {"input_tokens": 4, "output_tokens": 9}}}) == Usage(4, 9)
    assert usage_from_object({"usage": None}) is None
    assert usage_from_object({"usage": {"prompt_tokens": "many"}}) is None
    assert usage_from_object([1, 2]) is None


def test_json_tap_reads_a_whole_body_fed_in_pieces() -> None:
    body = json.dumps({"choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 4}}).encode()
    tap = JsonUsageTap()
    passed = b"".join(tap.feed(body[start : start + 7]) for start in range(0, len(body), 7))
    assert (passed, tap.finish(), tap.usage) == (body, b"", Usage(11, 4))


def test_json_tap_keeps_only_the_tail_of_a_large_body() -> None:
    body = json.dumps(
        {"data": [{"embedding": [0.1] * 5000}] * 20, "usage": {"prompt_tokens": 40, "total_tokens": 40}}
    ).encode()
    tap = JsonUsageTap(max_body_bytes=10_000, tail_bytes=1000)
    for start in range(0, len(body), 4096):
        tap.feed(body[start : start + 4096])
    assert len(tap._body) <= 10_000 + 4096
    tap.finish()
    assert tap.usage == Usage(40, 0)


def test_json_tap_without_usage_or_json() -> None:
    tap = JsonUsageTap()
    tap.feed(b"not json")
    tap.finish()
    assert tap.usage is None


def test_pass_through_tap_returns_each_chunk_at_once_and_sees_the_usage() -> None:
    tap = SseUsageTap()
    out = [tap.feed(chunk) for chunk in (STREAM[:10], STREAM[10:200], STREAM[200:])]
    assert out == [STREAM[:10], STREAM[10:200], STREAM[200:]]
    assert tap.finish() == b""
    assert tap.usage == Usage(7, 3)


def test_dropping_tap_removes_only_the_usage_only_chunk() -> None:
    tap = SseUsageTap(drop_usage_only=True)
    out = b"".join(tap.feed(event) for event in [*CONTENT, FINISH, USAGE_ONLY, DONE]) + tap.finish()
    assert out == b"".join([*CONTENT, FINISH, DONE])
    assert tap.usage == Usage(7, 3)


def test_dropping_tap_passes_each_event_as_soon_as_it_is_complete() -> None:
    tap = SseUsageTap(drop_usage_only=True)
    assert tap.feed(CONTENT[0][:5]) == b""
    assert tap.feed(CONTENT[0][5:]) == CONTENT[0]


def test_usage_in_a_chunk_with_choices_is_kept() -> None:
    # llama-server reports usage in its last content chunk rather than in a chunk of its own.
    last = _event(
        {"choices": [{"index": 0, "delta": {}}], "usage": {"prompt_tokens": 1, "completion_tokens": 2}}
    )
    tap = SseUsageTap(drop_usage_only=True)
    assert tap.feed(last) == last
    assert tap.usage == Usage(1, 2)


def test_crlf_events_and_an_unterminated_last_event() -> None:
    tap = SseUsageTap(drop_usage_only=True)
    crlf = CONTENT[0].replace(b"\n", b"\r\n")
    assert tap.feed(crlf) == crlf
    assert tap.feed(b'data: {"choices": [], "usage": {"prompt_tokens": 2}}') == b""
    assert tap.finish() == b'data: {"choices": [], "usage": {"prompt_tokens": 2}}'
    assert tap.usage == Usage(2, 0)


def test_an_oversized_event_is_passed_on_unexamined() -> None:
    tap = SseUsageTap(drop_usage_only=True, max_event_bytes=64)
    big = _event({"choices": [], "usage": {"prompt_tokens": 1}, "pad": "x" * 200})
    out = tap.feed(big[:100]) + tap.feed(big[100:]) + tap.feed(DONE) + tap.finish()
    assert out == big + DONE
    assert tap.usage is None


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12), st.booleans())
def test_any_chunking_gives_the_same_stream_and_usage(cuts: list[int], drop: bool) -> None:
    points = [0, *sorted(cuts), len(STREAM)]
    tap = SseUsageTap(drop_usage_only=drop)
    out = b"".join(tap.feed(STREAM[a:b]) for a, b in itertools.pairwise(points)) + tap.finish()
    assert out == (b"".join([*CONTENT, FINISH, DONE]) if drop else STREAM)
    assert tap.usage == Usage(7, 3)


def test_usage_is_requested_for_streamed_completions_only() -> None:
    body = {"model": "m", "stream": True, "stream_options": {"continuous_usage_stats": False}}
    assert request_stream_usage("chat/completions", body) == {
        "model": "m",
        "stream": True,
        "stream_options": {"continuous_usage_stats": False, "include_usage": True},
    }
    assert request_stream_usage("completions", {"stream": True, "stream_options": None}) == {
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    assert request_stream_usage("chat/completions", {"stream": False}) is None
    assert request_stream_usage("embeddings", {"stream": True}) is None
    assert (
        request_stream_usage("chat/completions", {"stream": True, "stream_options": {"include_usage": True}})
        is None
    )


def test_deeply_nested_upstream_json_has_no_usage_and_breaks_nothing() -> None:
    nested = b'{"usage": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    json_tap = JsonUsageTap()
    assert json_tap.feed(nested) == nested
    json_tap.finish()
    assert json_tap.usage is None
    sse_tap = SseUsageTap(drop_usage_only=True)
    event = b"data: " + nested + b"\n\n"
    assert sse_tap.feed(event) == event
    assert sse_tap.usage is None
