"""What the admin API's clients read over time: a model's log stream, and a model becoming Ready.

Both are plain state machines without I/O, fed by the sync and the async client alike.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterable, Iterable, Iterator

from mirbad_protocol import ModelState
from mirbad_protocol.admin import ModelView

from ._errors import stream_error
from .exceptions import ModelFailedError

# Internal to the admin API's clients; not part of the public API.
__all__: list[str] = []


class LogEvents:
    """Reads the log stream's server-sent events, one text line at a time.

    An event without a name is a log line (several ``data`` lines join with a newline); ``end`` closes
    the stream; ``error`` closes it with the reason the master could not read on.

    Args:
        limit: end after this many log lines (the tail of a log that is not followed); ``None`` reads
            until the stream ends.
    """

    def __init__(self, limit: int | None = None) -> None:
        self.ended = limit == 0
        self._left = limit
        self._data: list[str] | None = None
        self._event = ""

    def read(self, texts: Iterable[str]) -> Iterator[str]:
        """The log lines of a stream's text lines, up to the end (or the limit)."""
        # Checked before each read: the limit or the end must never wait for one more line.
        lines = iter(texts)
        while not self.ended:
            text = next(lines, None)
            if text is None:
                return
            line = self.feed(text)
            if line is not None:
                yield line

    async def aread(self, texts: AsyncIterable[str]) -> AsyncGenerator[str, None]:
        """:meth:`read` for a stream read asynchronously."""
        lines = aiter(texts)
        while not self.ended:
            text = await anext(lines, None)
            if text is None:
                return
            line = self.feed(text)
            if line is not None:
                yield line

    def feed(self, text: str) -> str | None:
        """Take one line of the stream; returns the log line an event completes, if any.

        Raises:
            LogFollowError: the master ended the stream with an ``error`` event.
        """
        if text:
            name, _, value = text.partition(":")
            if name == "data":
                self._data = [*(self._data or []), value.removeprefix(" ")]
            elif name == "event":
                self._event = value.strip()
            return None
        data, event = self._data, self._event
        self._data, self._event = None, ""
        if event == "error":
            self.ended = True
            raise stream_error("\n".join(data or []))
        if event == "end":
            self.ended = True
            return None
        if event or data is None:  # a comment, a keep-alive or an event of a newer master
            return None
        return self._counted("\n".join(data))

    def _counted(self, line: str) -> str:
        if self._left is not None:
            self._left -= 1
            self.ended = self._left <= 0
        return line


class ReadyWait:
    """The bookkeeping of waiting for a model to be Ready, by polling its view.

    Args:
        model_id: the model.
        timeout: the most seconds to wait.
        interval: the seconds between two reads.
    """

    def __init__(self, model_id: str, timeout: float, interval: float) -> None:
        self.model_id = model_id
        self._interval = interval
        self._deadline = time.monotonic() + timeout
        self._timeout = timeout

    def done(self, view: ModelView) -> bool:
        """Whether ``view`` is Ready.

        Raises:
            ModelFailedError: the model failed.
            TimeoutError: it is not Ready and the time is up.
        """
        state = view.status.state
        if state is ModelState.READY:
            return True
        if state is ModelState.FAILED:
            raise ModelFailedError(self.model_id, state.value, view.status.error)
        if time.monotonic() >= self._deadline:
            raise TimeoutError(f"model {self.model_id!r} is still {state.value} after {self._timeout:g} s")
        return False

    def pause(self) -> float:
        """The seconds to sleep before the next read."""
        return max(0.0, min(self._interval, self._deadline - time.monotonic()))
