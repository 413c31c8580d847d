"""Waiting, bounded, for what nothing signals: a child process's state, a driver's model, a page's timers."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import anyio
import pytest

from mirbad_protocol import ModelState, ModelStatus
from mirbad_runtime import RuntimeDriver

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


async def wait_for_state(
    driver: RuntimeDriver, model_id: str, state: ModelState, *, timeout_s: float, poll_s: float = 0.05
) -> ModelStatus:
    """Poll ``driver.status(model_id)`` until it reports ``state``; fail after ``timeout_s``.

    Args:
        driver: the driver that runs the model.
        model_id: the model to watch.
        state: the state to wait for.
        timeout_s: how long the state may take before the wait fails (``TimeoutError``).
        poll_s: the pause between two reads (a container driver's read asks dockerd).

    Returns:
        The first status in ``state``.
    """
    with anyio.fail_after(timeout_s):
        # Polled by design: a driver has no event for a state change (the process or container moves on).
        while (status := await driver.status(model_id)).state is not state:  # noqa: ASYNC110
            await anyio.sleep(poll_s)
    return status
