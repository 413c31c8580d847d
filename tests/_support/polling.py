"""Waiting, bounded, for a condition that nothing signals: a child process's state, a page's timers."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import anyio
import pytest

T = TypeVar("T")


def until(
    check: Callable[[], T], failure: str | Callable[[], str], *, timeout_s: float, poll_s: float = 0.1
) -> T:
    """Call ``check`` until it returns something true and return that; fail the test after ``timeout_s``.

    For tests that drive real processes from blocking code (``mirbad up``, a real agent).

    Args:
        check: what to poll.
        failure: the failure message, or what builds it (a log read only when the wait failed).
        timeout_s: how long the condition may take.
        poll_s: the pause between two checks.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(failure() if callable(failure) else failure)
        time.sleep(poll_s)


async def eventually(condition: Callable[[], bool], *, timeout_s: float, poll_s: float = 0.05) -> None:
    """Wait until ``condition`` holds, checking every ``poll_s``; ``TimeoutError`` after ``timeout_s``."""
    with anyio.fail_after(timeout_s):
        while not condition():  # noqa: ASYNC110 - polled by design: nothing signals the change
            await anyio.sleep(poll_s)
