"""The log stream's reader: server-sent events to log lines, and the ``error`` event's envelope."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from mirbad_client import LogFollowError
from mirbad_client._streams import LogEvents
from mirbad_protocol.admin import AdminErrorCode, admin_error_body

STREAM = [
    *(": keep-alive", ""),
    *("data: first", "data: second", ""),
    *("data:  indented", ""),
    *("data: ", ""),
    *("event: newer", "data: ignored", ""),
    *("event: end", "data: exited", ""),
    *("data: after the end", ""),
]


def test_log_events_join_data_lines_keep_empty_lines_and_skip_the_rest() -> None:
    events = LogEvents()

    assert list(events.read(STREAM)) == ["first\nsecond", " indented", ""]
    assert events.ended


def test_log_events_stop_at_the_limit_without_reading_on() -> None:
    seen: list[str] = []

    def texts() -> Iterator[str]:
        for text in STREAM:
            seen.append(text)
            yield text

    assert list(LogEvents(2).read(texts())) == ["first\nsecond", " indented"]
    assert seen[-2:] == ["data:  indented", ""]  # nothing read after the second line
    assert list(LogEvents(0).read(texts())) == []


def test_an_error_event_ends_the_stream_with_the_masters_reason() -> None:
    envelope = admin_error_body(
        AdminErrorCode.NODE_UNREACHABLE, "node 'gpu-1' stopped answering", node_id="gpu-1", model_id="qwen"
    )
    events = LogEvents()
    lines = events.read(["data: one", "", "event: error", f"data: {json.dumps(envelope)}", ""])

    assert next(lines) == "one"
    with pytest.raises(LogFollowError) as broken:
        next(lines)
    assert (broken.value.node_id, broken.value.model_id) == ("gpu-1", "qwen")
    assert (broken.value.code, str(broken.value)) == ("node_unreachable", "node 'gpu-1' stopped answering")
    assert events.ended


def test_an_error_event_of_a_master_before_the_envelope_keeps_its_text_and_names_no_node() -> None:
    # The node is never guessed from the words: an older master's plain message stays a message.
    lines = LogEvents().read(["event: error", "data: node 'gpu-1' stopped answering", ""])

    with pytest.raises(LogFollowError) as broken:
        next(lines)
    assert broken.value.node_id is None
    assert (broken.value.code, str(broken.value)) == ("log_stream_failed", "node 'gpu-1' stopped answering")
