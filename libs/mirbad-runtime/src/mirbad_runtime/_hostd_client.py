"""The client of hostd's unix-socket API, for the node agent: typed results, a bound on every call.

hostd answers on a unix socket only root and the docker group can open; httpx talks HTTP over it
(``AsyncHTTPTransport(uds=...)``). Every refusal becomes :class:`HostdRefusedError` with the code of
the envelope; everything else that goes wrong (no socket, a timeout, an answer outside the contract)
becomes :class:`HostdUnavailableError`, which callers treat as "no hostd here".
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, TypeVar
from urllib.parse import quote

import anyio
import httpx
from pydantic import TypeAdapter, ValidationError

from mirbad_protocol.hostd import (
    BackupMountRemoved,
    BackupMountStatus,
    BackupShare,
    BackupShareProbe,
    GpuProcess,
    HostdAction,
    HostdActionResult,
    HostdErrorBody,
    ServiceList,
    WhitelistAdd,
    WhitelistEntry,
    WhitelistUpdate,
)

from .exceptions import HostdRefusedError, HostdUnavailableError

__all__ = ["DEFAULT_HOSTD_SOCKET", "HostdClient"]

DEFAULT_HOSTD_SOCKET: Final = Path("/run/mirbad-hostd/hostd.sock")
"""Where the systemd unit's RuntimeDirectory puts hostd's socket."""

_T = TypeVar("_T")
_GPU_PROCESSES: Final = TypeAdapter(list[GpuProcess])
_MARGIN_S: Final = 5.0  # hostd bounds its own systemctl calls; the client waits a little longer
# An apply is a probe mount, its unmount and three systemctl calls (restart bounded by the unit's 30 s).
_MOUNT_APPLY_S: Final = 150.0


class HostdClient:
    """Calls hostd; open it with ``async with`` (one connection pool per client).

    Args:
        socket_path: hostd's socket.
        query_timeout_s: the bound of a listing (hostd's own is 15 s per systemctl call).
        action_timeout_s: the bound of an action or whitelist change (hostd's own is 60 s).
        transport: another transport (tests); the socket path is then unused.
    """

    def __init__(
        self,
        socket_path: Path = DEFAULT_HOSTD_SOCKET,
        *,
        query_timeout_s: float = 15.0 + _MARGIN_S,
        action_timeout_s: float = 60.0 + _MARGIN_S,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._query_timeout_s = query_timeout_s
        self._action_timeout_s = action_timeout_s
        self._client = httpx.AsyncClient(
            transport=transport or httpx.AsyncHTTPTransport(uds=str(socket_path)),
            base_url="http://hostd",
            timeout=httpx.Timeout(None),  # bounded per call with anyio below, connect included
        )

    async def __aenter__(self) -> HostdClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()

    async def services(self, *, include_all: bool = False) -> ServiceList:
        """``GET /services``: the whitelisted units; with ``include_all`` discovery and the deny list."""
        params = {"include": "all"} if include_all else None
        data = await self._call("GET", "/services", self._query_timeout_s, params=params)
        return _parse(ServiceList.from_wire, data)

    async def act(self, name: str, action: HostdAction, *, confirm: str | None = None) -> HostdActionResult:
        """``POST /services/{name}/{action}``: queue the action; a protected service needs ``confirm``."""
        params = {"confirm": confirm} if confirm is not None else None
        path = f"/services/{_segment(name)}/{action}"
        data = await self._call("POST", path, self._action_timeout_s, params=params)
        return _parse(HostdActionResult.from_wire, data)

    async def add_to_whitelist(self, request: WhitelistAdd) -> WhitelistEntry:
        """``POST /whitelist``."""
        data = await self._call("POST", "/whitelist", self._action_timeout_s, json=request.to_wire())
        return _parse(WhitelistEntry.from_wire, data)

    async def update_whitelist(self, name: str, request: WhitelistUpdate) -> WhitelistEntry:
        """``PATCH /whitelist/{name}``."""
        path = f"/whitelist/{_segment(name)}"
        data = await self._call("PATCH", path, self._action_timeout_s, json=request.to_wire())
        return _parse(WhitelistEntry.from_wire, data)

    async def remove_from_whitelist(self, name: str) -> WhitelistEntry:
        """``DELETE /whitelist/{name}``: the removed entry."""
        data = await self._call("DELETE", f"/whitelist/{_segment(name)}", self._action_timeout_s)
        return _parse(WhitelistEntry.from_wire, data)

    async def gpu_processes(self, *, timeout_s: float = 3.0) -> list[GpuProcess]:
        """``GET /gpu-processes`` within ``timeout_s`` (telemetry's bound: 3 s)."""
        data = await self._call("GET", "/gpu-processes", timeout_s)
        return _parse(_GPU_PROCESSES.validate_python, data)

    async def backup_mount(self, *, timeout_s: float = 3.0 + _MARGIN_S) -> BackupMountStatus:
        """``GET /backup-mount``: the share hostd manages and what is mounted at its target (3 s bound)."""
        data = await self._call("GET", "/backup-mount", timeout_s)
        return _parse(BackupMountStatus.from_wire, data)

    async def apply_backup_mount(self, share: BackupShare) -> BackupMountStatus:
        """``PUT /backup-mount``: test, write and mount ``share`` at the fixed target."""
        data = await self._call("PUT", "/backup-mount", _MOUNT_APPLY_S, json=share.to_wire())
        return _parse(BackupMountStatus.from_wire, data)

    async def test_backup_mount(self, share: BackupShare) -> BackupShareProbe:
        """``POST /backup-mount/test``: mount ``share`` aside and write a file as the backup account."""
        data = await self._call("POST", "/backup-mount/test", self._action_timeout_s, json=share.to_wire())
        return _parse(BackupShareProbe.from_wire, data)

    async def remove_backup_mount(self) -> BackupMountRemoved:
        """``DELETE /backup-mount``: unmount and remove the share's unit, credentials and state."""
        data = await self._call("DELETE", "/backup-mount", self._action_timeout_s)
        return _parse(BackupMountRemoved.from_wire, data)

    async def _call(self, method: str, path: str, timeout_s: float, **kwargs: Any) -> Any:
        try:
            with anyio.fail_after(timeout_s):
                response = await self._client.request(method, path, **kwargs)
        except TimeoutError:
            raise HostdUnavailableError(
                f"hostd did not answer {method} {path} within {timeout_s:g} s"
            ) from None
        except httpx.HTTPError as exc:
            raise HostdUnavailableError(f"hostd cannot be reached: {exc}") from None
        try:
            data = response.json()
        except ValueError:
            raise HostdUnavailableError(f"hostd answered {response.status_code} without JSON") from None
        if response.is_success:
            return data
        try:
            error = HostdErrorBody.from_wire(data).error
        except ValueError:
            raise HostdUnavailableError(
                f"hostd answered {response.status_code} outside its contract"
            ) from None
        raise HostdRefusedError(
            response.status_code, error.code, error.message, field=error.field, pattern=error.pattern
        )


def _segment(name: str) -> str:
    # One path segment whatever the name holds; hostd then refuses a bad name with 422, by name.
    return quote(name, safe="")


def _parse(parse: Callable[[Any], _T], data: object) -> _T:
    try:
        return parse(data)
    except (ValueError, ValidationError) as exc:
        raise HostdUnavailableError(f"hostd answered outside its contract: {exc}") from None
