"""Starting a model for the request that asked for it, and waiting until it is Ready."""

from __future__ import annotations

import anyio
from starlette.responses import Response
from starlette.types import Receive

from mirbad_protocol import MirbadError, ModelState
from mirbad_protocol.support import single_errors

from . import _errors as errors
from ._contracts import ModelResolver, Resolution
from ._relay import CLIENT_CLOSED_REQUEST, wait_for_disconnect
from .exceptions import StartDeferredError

__all__: list[str] = []


async def wait_until_ready(
    resolver: ModelResolver, model: Resolution, receive: Receive, timeout_s: float, poll_interval_s: float
) -> Resolution | Response:
    """Start ``model`` (unless it is starting already) and poll until it is Ready.

    Returns the Ready resolution, or the response to send instead: the start was refused, the model
    failed or disappeared, the timeout passed, or the client left (then nobody reads it).
    """
    if model.state is not ModelState.STARTING:
        try:
            await resolver.start_on_request(model.model_id)
        except StartDeferredError as error:
            return errors.start_deferred(model.served_name, str(error))
        except MirbadError as error:
            return errors.start_refused(model.served_name, str(error))
    wait = _StartWait(resolver, model)
    with single_errors():
        async with anyio.create_task_group() as group:

            async def watch_client() -> None:
                await wait_for_disconnect(receive)
                wait.client_left = True
                group.cancel_scope.cancel()

            group.start_soon(watch_client)
            with anyio.move_on_after(timeout_s):
                await wait.poll(poll_interval_s)
            group.cancel_scope.cancel()
    return wait.result(timeout_s)


class _StartWait:
    """The state of one wait, kept outside the task group so errors need no unwrapping."""

    def __init__(self, resolver: ModelResolver, model: Resolution) -> None:
        self.client_left = False
        self._resolver = resolver
        self._latest = model
        self._outcome: Resolution | Response | None = None
        self._error: Exception | None = None
        # A model that was Failed may still read Failed for a moment after the start; only a Failed
        # seen after it left that state (or when it was not Failed to begin with) ends the wait.
        self._moved = model.state is not ModelState.FAILED

    async def poll(self, interval_s: float) -> None:
        try:
            while self._outcome is None:
                self._outcome = await self._check()
                if self._outcome is None:
                    await anyio.sleep(interval_s)
        except Exception as error:  # re-raised by result(), outside the task group
            self._error = error

    async def _check(self) -> Resolution | Response | None:
        latest = await self._resolver.resolve(self._latest.served_name)
        if latest is None:
            return errors.model_not_found(self._latest.served_name)
        self._latest = latest
        if latest.ready:
            return latest
        if latest.state is ModelState.FAILED and self._moved:
            return errors.not_ready(latest.served_name, latest.state, latest.error)
        self._moved = self._moved or latest.state is not ModelState.FAILED
        return None

    def result(self, timeout_s: float) -> Resolution | Response:
        if self._error is not None:
            raise self._error
        if self.client_left:
            return Response(status_code=CLIENT_CLOSED_REQUEST)
        if self._outcome is None:
            return errors.start_timed_out(self._latest.served_name, self._latest.state, timeout_s)
        return self._outcome
