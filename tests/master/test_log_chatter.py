"""The portal's WebSocket chatter is logged at DEBUG; uvicorn's other lines keep their level."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

import pytest

from mirbad_master._log_chatter import WebSocketChatter, quiet_websocket_chatter

# The lines as uvicorn and the websockets library log them on "uvicorn.error".
ACCEPTED = ('%s - "WebSocket %s" [accepted]', ("127.0.0.1:50312", "/_nicegui_ws/socket.io/?EIO=4"))
CHATTER = [ACCEPTED, ("connection open", ()), ("connection closed", ())]
KEPT = [
    ('%s - "WebSocket %s" 403', ("127.0.0.1:50312", "/_nicegui_ws/socket.io/")),
    ("Started server process [%d]", (4242,)),
]


@pytest.fixture
def uvicorn_logger() -> Iterator[logging.Logger]:
    logger = logging.getLogger("uvicorn.error")
    chatter = quiet_websocket_chatter()
    yield logger
    logger.removeFilter(chatter)


def _log(logger: logging.Logger, lines: Sequence[tuple[str, Sequence[object]]]) -> None:
    for message, args in lines:
        logger.info(message, *args)


def test_at_info_the_chatter_is_dropped_and_the_rest_kept(
    uvicorn_logger: logging.Logger, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    _log(uvicorn_logger, [*CHATTER, *KEPT])

    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("INFO", '127.0.0.1:50312 - "WebSocket /_nicegui_ws/socket.io/" 403'),
        ("INFO", "Started server process [4242]"),
    ]


def test_at_debug_the_chatter_is_there_as_debug(
    uvicorn_logger: logging.Logger, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    _log(uvicorn_logger, CHATTER)

    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("DEBUG", '127.0.0.1:50312 - "WebSocket /_nicegui_ws/socket.io/?EIO=4" [accepted]'),
        ("DEBUG", "connection open"),
        ("DEBUG", "connection closed"),
    ]


def test_installing_twice_adds_one_filter(uvicorn_logger: logging.Logger) -> None:
    again = quiet_websocket_chatter()

    assert [f for f in uvicorn_logger.filters if isinstance(f, WebSocketChatter)] == [again]
