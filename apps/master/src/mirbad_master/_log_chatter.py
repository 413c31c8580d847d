"""The portal's WebSocket chatter goes to DEBUG, so the INFO log says what matters.

Every portal tab holds a WebSocket that reconnects on each page change: uvicorn logs each one as
``"WebSocket /_nicegui_ws/..." [accepted]`` and the websockets library adds ``connection open`` and
``connection closed``, all at INFO on ``uvicorn.error``. In a `mirbad up` session that was most of the
log. The logger cannot simply be raised to WARNING: it also carries uvicorn's start-up and error lines.
"""

from __future__ import annotations

import logging
from typing import Final

__all__ = ["WebSocketChatter", "quiet_websocket_chatter"]

_LOGGER: Final = "uvicorn.error"
_PLAIN: Final = frozenset({"connection open", "connection closed"})
_ACCEPTED: Final = '"WebSocket %s" [accepted]'


class WebSocketChatter(logging.Filter):
    """Demotes the INFO lines of a WebSocket opening or closing to DEBUG (dropped unless DEBUG is on)."""

    def __init__(self, logger: logging.Logger) -> None:
        super().__init__()
        self._logger = logger

    def filter(self, record: logging.LogRecord) -> bool:
        """Keep every other record as it is; a chatter line only when the logger shows DEBUG."""
        if record.levelno != logging.INFO or not _is_chatter(record.msg):
            return True
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return self._logger.isEnabledFor(logging.DEBUG)


def _is_chatter(message: object) -> bool:
    return isinstance(message, str) and (message in _PLAIN or message.endswith(_ACCEPTED))


def quiet_websocket_chatter() -> WebSocketChatter:
    """Install :class:`WebSocketChatter` on uvicorn's logger (once) and return it."""
    logger = logging.getLogger(_LOGGER)
    for present in logger.filters:
        if isinstance(present, WebSocketChatter):
            return present
    chatter = WebSocketChatter(logger)
    logger.addFilter(chatter)
    return chatter
