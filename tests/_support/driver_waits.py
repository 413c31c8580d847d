"""Waiting for a runtime driver's model to reach a state, for the driver tests of every tier."""

from __future__ import annotations

import anyio

from mirbad_protocol import ModelState, ModelStatus
from mirbad_runtime import RuntimeDriver


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
