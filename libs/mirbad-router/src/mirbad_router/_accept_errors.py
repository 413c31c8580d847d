"""Failed accepts: reported once per interval, and the waiting connections shed instead of piling up.

When the process runs out of descriptors, asyncio's accept fails with EMFILE and it reports that
through the loop's exception handler (with a traceback) once for each of the burst's accepts, then
retries each in a second, which fail again: the log grew 218 MB in 35 s. :class:`AcceptErrorLog`
reports such failures at most once per interval, with a count, and no traceback. It also keeps one
spare descriptor: on a failed accept it frees it to accept and at once close every waiting connection
(a client learns at once instead of hanging in the queue, and the loop's burst ends at the next,
empty, accept), then takes it back. The connection limit (:mod:`._connections`) keeps this from
happening because of the master's own connections; this is for whatever else used the descriptors.
"""

from __future__ import annotations

# The handler is the asyncio loop's own: it receives asyncio's contexts.
import asyncio  # noqa: TID251
import logging
import os
import socket
import time
from collections.abc import Callable
from typing import Any, Final

__all__ = ["AcceptErrorLog", "install_accept_error_log"]

_logger = logging.getLogger("mirbad_router.serving")
_RETRIES: Final = ("._start_serving(", "._accept_connection(")  # asyncio's retry callbacks, by name


class AcceptErrorLog:
    """An event loop exception handler that reports failed accepts at most once per ``interval_s``.

    Other contexts go to the handler it replaces (or the loop's default).

    Args:
        previous: the loop's handler before this one (``None``: the default handler).
        interval_s: the shortest time between two reports.
        clock: monotonic seconds (tests pass a fake).
    """

    def __init__(
        self,
        previous: Callable[[asyncio.AbstractEventLoop, dict[str, Any]], object] | None,
        *,
        interval_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._previous = previous
        self._interval_s = interval_s
        self._clock = clock
        self._last: float | None = None
        self._unreported = 0
        self._spare: int | None = _open_spare()

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """Handle one exception context of ``loop``."""
        if not _about_accepting(context):
            if self._previous is not None:
                self._previous(loop, context)
            else:
                loop.default_exception_handler(context)
            return
        listener = context.get("socket")
        if listener is not None:
            self._shed(listener.fileno())
        self._unreported += 1
        now = self._clock()
        if self._last is not None and now - self._last < self._interval_s:
            return
        _logger.error(
            "cannot accept connections: %s (%d time(s) since the last report; the next in %.0f s or later)",
            context.get("exception") or context.get("message"),
            self._unreported,
            self._interval_s,
        )
        self._last = now
        self._unreported = 0

    def _shed(self, descriptor: int) -> None:
        if self._spare is None or descriptor < 0:
            return
        os.close(self._spare)
        self._spare = None
        listener = socket.socket(fileno=descriptor)  # the loop's listener, borrowed (detached below)
        try:
            while True:
                try:
                    waiting, _address = listener.accept()
                except OSError:  # drained (it is non-blocking), or the descriptor went elsewhere
                    break
                waiting.close()
        finally:
            listener.detach()
            self._spare = _open_spare()


def _about_accepting(context: dict[str, Any]) -> bool:
    # "socket.accept() out of system resource", or one of the retries failing (again, or with a bad
    # descriptor once the listener closed).
    message = str(context.get("message", ""))
    return message.startswith("socket.accept()") or any(name in message for name in _RETRIES)


def _open_spare() -> int | None:
    try:
        return os.open(os.devnull, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None


def install_accept_error_log() -> None:
    """Put an :class:`AcceptErrorLog` in front of the running loop's exception handler (once per loop)."""
    loop = asyncio.get_running_loop()
    current = loop.get_exception_handler()
    if not isinstance(current, AcceptErrorLog):
        loop.set_exception_handler(AcceptErrorLog(current))
