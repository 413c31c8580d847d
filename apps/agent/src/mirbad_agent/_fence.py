"""The agent's fence: the highest master epoch it has seen, and the guard that refuses older commands.

A master names itself on every request (``mirbad_protocol.agent.MASTER_ID_HEADER`` and
``MASTER_EPOCH_HEADER``). A *command* (any request that changes something: starts, stops, restarts,
downloads, image pulls, host actions) from an epoch below the highest one seen is refused with 409
``fenced`` naming both epochs, so a stale master (the one a recovery replaced) or a second one cannot
drive the node; reads (GETs, and the POSTs that only read: GGUF inspection, the model-files check, the
proxied OpenAI calls) always pass. An agent that has never seen an epoch takes the first it is sent.
At the same epoch only the master that set it commands: another instance id there is fenced too.
A command carrying no fence is taken only while the agent has seen none (a master of before fencing,
tests driving the agent directly); afterwards it is refused like an older epoch.

The highest epoch is kept in ``master-fence.json`` in the state folder, written atomically before the
command runs, so it survives an agent restart and a crash never lowers it.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Final

import anyio
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from mirbad_protocol import InvalidFieldError
from mirbad_protocol.agent import (
    AGENT_API_PREFIX,
    ROUTE_FENCE,
    ROUTE_GGUF_INSPECT,
    ROUTE_MODEL_FILES,
    AgentErrorCode,
    FenceState,
    MasterFence,
    agent_path,
    parse_fence_headers,
)

from ._errors import agent_error_response
from .exceptions import FencedError, FenceStateError

__all__ = ["FENCE_FILE_NAME", "EpochFence", "FenceGuard", "fence_routes", "is_command"]

logger = logging.getLogger(__name__)

FENCE_FILE_NAME: Final = "master-fence.json"
"""The fence's file in the agent's state folder."""

_READ_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
# POST routes that only read: never fenced, or a fenced master could not even look.
_READ_POSTS: Final = frozenset({agent_path(ROUTE_GGUF_INSPECT), agent_path(ROUTE_MODEL_FILES)})
_PROXY_PREFIX: Final = AGENT_API_PREFIX + "/proxy/"


def is_command(method: str, path: str) -> bool:
    """Whether a request to ``path`` with ``method`` is a command (fenced) rather than a read."""
    if method.upper() in _READ_METHODS:
        return False
    return not (path in _READ_POSTS or path.startswith(_PROXY_PREFIX))


class EpochFence:
    """The highest master epoch this agent has seen, kept in ``{state_dir}/master-fence.json``.

    Args:
        state_dir: the agent's state folder.
    """

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / FENCE_FILE_NAME
        self._lock = anyio.Lock()
        self._seen: MasterFence | None = None
        self._loaded = False

    async def current(self) -> MasterFence | None:
        """The master holding the fence now (None before any command named one).

        Raises:
            FenceStateError: the file cannot be read or is not a fence (it is left as it is).
        """
        async with self._lock:
            return await self._load()

    async def admit(self, claim: MasterFence | None) -> None:
        """Let a command named by ``claim`` through, raising the fence first when its epoch is newer.

        Raises:
            FencedError: ``claim`` is below the fence, another master at the fence's epoch, or no
                claim after the agent has seen one.
            FenceStateError: the file cannot be read, or the new epoch cannot be written (the command
                must not run then: a restart would forget the fence).
        """
        async with self._lock:
            seen = await self._load()
            if seen is None and claim is None:
                return
            if claim is None:
                assert seen is not None
                raise FencedError(seen.epoch, None, "the command names no master epoch")
            if seen is not None and claim.epoch < seen.epoch:
                raise FencedError(seen.epoch, claim.epoch, f"master {claim.instance_id!r} is older")
            if seen is not None and claim.epoch == seen.epoch:
                if claim.instance_id != seen.instance_id:
                    raise FencedError(
                        seen.epoch,
                        claim.epoch,
                        f"epoch {seen.epoch} belongs to master {seen.instance_id!r}, "
                        f"not {claim.instance_id!r}",
                    )
                return
            await anyio.to_thread.run_sync(self._write, claim)
            self._seen = claim
            logger.warning(
                "master %s at epoch %d now commands this node (before: %s)",
                claim.instance_id,
                claim.epoch,
                "none" if seen is None else f"{seen.instance_id} at epoch {seen.epoch}",
            )

    async def _load(self) -> MasterFence | None:
        if not self._loaded:
            self._seen = await anyio.to_thread.run_sync(self._read)
            self._loaded = True
        return self._seen

    def _read(self) -> MasterFence | None:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise FenceStateError(self.path, f"cannot be read: {exc}") from None
        try:
            data = json.loads(raw)
            instance_id, epoch = data["instanceId"], data["epoch"]
        except (ValueError, TypeError, KeyError):
            raise FenceStateError(self.path, "is not a master fence") from None
        if not isinstance(instance_id, str) or type(epoch) is not int or epoch < 0:
            raise FenceStateError(self.path, "is not a master fence")
        return MasterFence(instance_id=instance_id, epoch=epoch)

    def _write(self, fence: MasterFence) -> None:
        body = json.dumps({"instanceId": fence.instance_id, "epoch": fence.epoch}).encode()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
            try:
                with os.fdopen(handle, "wb") as file:
                    file.write(body)
                    file.flush()
                    os.fsync(file.fileno())
                os.replace(temporary, self.path)
            except BaseException:
                Path(temporary).unlink(missing_ok=True)
                raise
            _sync_folder(self.path.parent)
        except OSError as exc:
            raise FenceStateError(self.path, f"cannot be written: {exc}") from None


def _sync_folder(folder: Path) -> None:
    # The rename itself must reach the disk, or a power cut could bring the older fence back.
    if os.name != "posix":
        return
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


class FenceGuard:
    """ASGI middleware: every command passes :meth:`EpochFence.admit` before it reaches a route.

    It answers its refusals itself (it sits outside the app's exception handlers): 409 ``fenced``
    with both epochs, 400 ``invalid_request`` naming a malformed header, 507 ``insufficient_storage``
    when the fence cannot be kept.
    """

    def __init__(self, app: ASGIApp, fence: EpochFence) -> None:
        self.app = app
        self.fence = fence

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_command(scope["method"], scope["path"]):
            await self.app(scope, receive, send)
            return
        try:
            await self.fence.admit(parse_fence_headers(Headers(scope=scope)))
        except InvalidFieldError as exc:
            answer = agent_error_response(AgentErrorCode.INVALID_REQUEST, str(exc), field=exc.field)
        except FencedError as exc:
            answer = agent_error_response(
                AgentErrorCode.FENCED, str(exc), epoch=exc.epoch, request_epoch=exc.request_epoch
            )
        except FenceStateError as exc:
            logger.error("%s", exc)
            answer = agent_error_response(AgentErrorCode.INSUFFICIENT_STORAGE, str(exc))
        else:
            await self.app(scope, receive, send)
            return
        await answer(scope, receive, send)


def fence_routes(fence: EpochFence | None) -> list[BaseRoute]:
    """``/fence``: read the master this node follows; POST claims it (the guard raised the fence first).

    Without a fence (tests of single routes) both answer an empty state.
    """

    async def state(request: Request) -> Response:
        current = await fence.current() if fence is not None else None
        if current is None:
            return JSONResponse(FenceState().to_wire())
        return JSONResponse(FenceState(instance_id=current.instance_id, epoch=current.epoch).to_wire())

    return [Route(ROUTE_FENCE, state, methods=["GET", "POST"])]
