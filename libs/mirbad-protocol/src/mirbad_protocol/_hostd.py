"""The agent-hostd contract: the wire models of hostd's unix-socket API and its error codes.

hostd (``mirbad-hostd``) is the root daemon behind the Services page; only the node agent talks to it,
over a unix socket only root and the docker group can reach. Responses are tolerant wire models; the
request bodies (:class:`WhitelistAdd`, :class:`WhitelistUpdate`) are validated as user input, because
they carry what a person typed on the Services page: an unknown field is refused with its name.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any, Final, Literal

from pydantic import AfterValidator, Field

from ._user_input import printable_name
from ._wire import WireModel

__all__ = [
    "HOSTD_ACTIONS",
    "MAX_UNIT_NAME_LENGTH",
    "ROUTE_HOST_BACKUP_MOUNT",
    "ROUTE_HOST_BACKUP_MOUNT_TEST",
    "ROUTE_HOST_GPU_PROCESSES",
    "ROUTE_HOST_SERVICES",
    "ROUTE_HOST_SERVICE_ACTION",
    "ROUTE_HOST_WHITELIST",
    "ROUTE_HOST_WHITELIST_ENTRY",
    "DiscoveredService",
    "DiscoveryError",
    "GpuProcess",
    "HostServiceStatus",
    "HostdAction",
    "HostdActionResult",
    "HostdErrorBody",
    "HostdErrorCode",
    "HostdErrorDetail",
    "ServiceList",
    "ServiceScope",
    "WhitelistAdd",
    "WhitelistEntry",
    "WhitelistUpdate",
    "hostd_error_body",
    "service_name",
    "unit_name",
]

MAX_UNIT_NAME_LENGTH: Final = 256
"""The longest unit or service name hostd accepts (systemd's own limit is 255 plus the suffix)."""

# The node agent's pass-through routes (under /agent/v1): the same calls as hostd's own, one prefix.
ROUTE_HOST_SERVICES: Final = "/host/services"
"""GET (``?include=all``): the node's :class:`ServiceList`, from its hostd."""
ROUTE_HOST_SERVICE_ACTION: Final = "/host/services/{name:path}/{action}"
"""POST (``?confirm=NAME``): one action on a whitelisted unit (:class:`HostdActionResult`, 202)."""
ROUTE_HOST_WHITELIST: Final = "/host/whitelist"
"""POST :class:`WhitelistAdd`: a new whitelist entry (201)."""
ROUTE_HOST_WHITELIST_ENTRY: Final = "/host/whitelist/{name:path}"
"""PATCH :class:`WhitelistUpdate`, DELETE: one whitelist entry."""
ROUTE_HOST_GPU_PROCESSES: Final = "/host/gpu-processes"
"""GET: the node's GPU compute processes with their owners (:class:`GpuProcess` list)."""
ROUTE_HOST_BACKUP_MOUNT: Final = "/host/backup-mount"
"""GET, PUT :class:`~mirbad_protocol.hostd.BackupShare`, DELETE: the backup share hostd mounts."""
ROUTE_HOST_BACKUP_MOUNT_TEST: Final = "/host/backup-mount/test"
"""POST :class:`~mirbad_protocol.hostd.BackupShare`: mount it aside and write a file as the backup account."""

HostdAction = Literal["start", "stop", "restart", "enable", "disable"]
"""What ``POST /services/{name}/{action}`` can do to a whitelisted unit."""

HOSTD_ACTIONS: Final[tuple[HostdAction, ...]] = ("start", "stop", "restart", "enable", "disable")
"""Every action, in the order the Services page offers them."""

ServiceScope = Literal["system", "user"]
"""Which manager a unit belongs to: PID 1, or a discoverUsers user's own manager."""

# systemd's unit-name alphabet without the backslash: no path separator, space or shell metacharacter
# can pass, so a name is always one argv element that systemctl reads as a unit and nothing else.
_UNIT_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9:_.@-]*", re.ASCII)
_USER_NAME: Final = re.compile(r"[a-z_][a-z0-9_.-]{0,31}\$?", re.ASCII)


def unit_name(value: str) -> str:
    """Check a unit name typed by a person and give it its ``.service`` suffix when it has none.

    Raises:
        ValueError: empty, over :data:`MAX_UNIT_NAME_LENGTH`, or with a character outside systemd's
            unit-name alphabet (path separators, spaces and shell metacharacters are all outside it).
    """
    if len(value) > MAX_UNIT_NAME_LENGTH:
        raise ValueError(f"must be at most {MAX_UNIT_NAME_LENGTH} characters")
    if not _UNIT_NAME.fullmatch(value):
        raise ValueError("must be a systemd unit name: letters, digits and : _ . @ - only")
    return value if value.endswith(".service") else f"{value}.service"


def service_name(value: str) -> str:
    """Check a whitelist name (``smartmontools``): the unit-name alphabet, at most 256 characters.

    Raises:
        ValueError: as :func:`unit_name` does.
    """
    if len(value) > MAX_UNIT_NAME_LENGTH:
        raise ValueError(f"must be at most {MAX_UNIT_NAME_LENGTH} characters")
    if not _UNIT_NAME.fullmatch(value):
        raise ValueError("must be letters, digits and : _ . @ - only")
    return value


def _user_name(value: str) -> str:
    if not _USER_NAME.fullmatch(value):
        raise ValueError("must be a POSIX user name")
    return value


# printable: a display name lands in log lines and on the page; no control character may forge either.
_Text = Annotated[str, Field(max_length=200), AfterValidator(printable_name)]


class WhitelistEntry(WireModel):
    """One unit hostd may act on, as the whitelist file stores it.

    Attributes:
        name: the service's own name (``smartmontools``), unique in the whitelist; the API's ``{name}``.
        unit: the systemd unit (``smartmontools.service``).
        scope: ``system`` (PID 1) or ``user`` (the user manager of :attr:`user`).
        user: the owner of a user unit.
        display_name: what the Services page shows.
        description: a line about what the service does.
        protected: stop, restart and autostart-off need the typed name as confirmation.
        risks: what stopping it breaks, shown beside the confirmation.
    """

    name: str
    unit: str
    scope: ServiceScope = "system"
    user: str | None = None
    display_name: str = ""
    description: str = ""
    protected: bool = False
    risks: list[str] = Field(default_factory=list)

    @property
    def label(self) -> str:
        """The display name, else the name."""
        return self.display_name or self.name


class WhitelistAdd(WireModel):
    """``POST /whitelist``: put a discovered unit on the whitelist.

    Attributes:
        unit: the unit (a bare name gets ``.service``); it must be loaded with a unit file.
        scope: ``system`` or ``user``.
        user: the owner of a user unit; only discoverUsers users.
        display_name: the name shown on the page; defaults to the service name.
        protected: whether stop, restart and autostart-off will need the typed name.
        confirm: the name the unit gets (the unit without ``.service``), typed to confirm the add.
    """

    unit: Annotated[str, AfterValidator(unit_name)]
    scope: ServiceScope = "system"
    user: Annotated[str, AfterValidator(_user_name)] | None = None
    display_name: _Text = ""
    protected: bool = False
    confirm: Annotated[str, Field(max_length=MAX_UNIT_NAME_LENGTH)]


class WhitelistUpdate(WireModel):
    """``PATCH /whitelist/{name}``: rename for display or change protection.

    Attributes:
        display_name: the new display name; None keeps it.
        protected: the new protection; turning it off needs ``confirm``.
        confirm: the entry's name, typed to confirm unprotecting.
    """

    display_name: _Text | None = None
    protected: bool | None = None
    confirm: Annotated[str, Field(max_length=MAX_UNIT_NAME_LENGTH)] | None = None


class HostServiceStatus(WireModel):
    """A whitelisted unit with its state as ``systemctl show`` reported it.

    Attributes:
        entry: the whitelist entry.
        load_state: ``loaded``, ``not-found`` ... (``unknown`` when systemctl could not be asked).
        active_state: ``active``, ``inactive``, ``failed``, ``activating`` ...
        sub_state: ``running``, ``dead``, ``exited`` ...
        unit_file_state: ``enabled``, ``disabled``, ``static`` ...
        autostart: whether the unit starts at boot (its unit file is enabled).
        memory_bytes: the cgroup's current memory; None when accounting is off.
        gpu_memory_mib: the unit's nvidia-smi compute processes (its cgroup or below), summed.
        active_since: when it last became active, seconds since the epoch.
        error: why the state could not be read.
    """

    entry: WhitelistEntry
    load_state: str = "unknown"
    active_state: str = "unknown"
    sub_state: str = "unknown"
    unit_file_state: str = ""
    autostart: bool = False
    memory_bytes: int | None = None
    gpu_memory_mib: float = Field(default=0.0, alias="gpuMemoryMiB")
    active_since: int | None = None
    error: str | None = None


class DiscoveredService(WireModel):
    """A unit found on the host, whitelisted or not.

    Attributes:
        unit: the unit name.
        scope: ``system`` or ``user``.
        user: the owner of a user unit.
        description: the unit's Description=.
        load_state: its load state.
        active_state: its active state.
        sub_state: its sub state.
        unit_file_state: ``enabled``, ``disabled``, ``static`` ...
        memory_bytes: MemoryCurrent; None when accounting is off.
        gpu_memory_mib: the GPU memory of processes in its cgroup or below.
        managed: whether it is on the whitelist (:attr:`name` then holds its entry's name).
        name: the whitelist name of a managed unit.
        denied: on the hard deny list: read-only, "System — not manageable".
        deny_pattern: the pattern that denies it.
    """

    unit: str
    scope: ServiceScope = "system"
    user: str | None = None
    description: str = ""
    load_state: str = ""
    active_state: str = ""
    sub_state: str = ""
    unit_file_state: str = ""
    memory_bytes: int | None = None
    gpu_memory_mib: float = Field(default=0.0, alias="gpuMemoryMiB")
    managed: bool = False
    name: str | None = None
    denied: bool = False
    deny_pattern: str | None = None


class DiscoveryError(WireModel):
    """A manager discovery could not read (a user without a running manager, a failed systemctl).

    Attributes:
        scope: ``system`` or ``user``.
        user: the user whose manager failed.
        message: what went wrong.
    """

    scope: ServiceScope
    user: str | None = None
    message: str


class ServiceList(WireModel):
    """``GET /services``: the whitelisted units; with ``?include=all`` discovery too.

    Attributes:
        services: the whitelisted units with their state.
        discovered: every unit discovery found (``include=all`` only).
        discovery_errors: the managers discovery could not read (``include=all`` only).
        deny_patterns: the deny list in force, built-in patterns first (``include=all`` only).
    """

    services: list[HostServiceStatus] = Field(default_factory=list)
    discovered: list[DiscoveredService] | None = None
    discovery_errors: list[DiscoveryError] | None = None
    deny_patterns: list[str] | None = None


class HostdActionResult(WireModel):
    """The answer to an accepted action: systemd queued the job (``--no-block``); poll the status.

    Attributes:
        name: the whitelist name.
        unit: the unit acted on.
        action: what was asked.
        result: ``ok``.
    """

    name: str
    unit: str
    action: HostdAction
    result: Literal["ok"]


class GpuProcess(WireModel):
    """``GET /gpu-processes``: one nvidia-smi compute process and who owns it.

    Attributes:
        pid: the process id.
        name: nvidia-smi's process name.
        used_mib: its GPU memory in MiB.
        container_id: the Docker container it runs in (64 hex digits), when it does.
        unit: the innermost ``.service`` unit of its cgroup otherwise.
        display_name: the whitelist's display name of that unit.
    """

    pid: int
    name: str
    used_mib: float = Field(alias="usedMiB")
    container_id: str | None = None
    unit: str | None = None
    display_name: str | None = None


class HostdErrorCode(StrEnum):
    """Why hostd refused a request; each code has one HTTP status (:attr:`http_status`)."""

    INVALID_REQUEST = "invalid_request"
    """422: a field, path segment or query parameter breaks the contract (``field`` names it)."""
    DENIED = "denied"
    """403: the unit is on the hard deny list; nothing can touch it."""
    CONFIRM = "confirm"
    """403: a protected service's action, or an unprotect, without ``confirm`` set to its name."""
    NOT_FOUND = "not_found"
    """404: no whitelist entry of that name, an unknown action or route."""
    METHOD_NOT_ALLOWED = "method_not_allowed"
    """405: the route exists but not with this method."""
    EXISTS = "exists"
    """409: the whitelist has an entry of that name already."""
    UNIT_UNAVAILABLE = "unit_unavailable"
    """409: the unit to add is not loaded with a unit file."""
    ACTION_FAILED = "action_failed"
    """502: systemctl refused or failed the action (its message is passed on)."""
    GPU_UNAVAILABLE = "gpu_unavailable"
    """503: nvidia-smi failed, hung or is missing."""
    MOUNT_CONFLICT = "mount_conflict"
    """409: the backup target has a unit, an automount or a mount hostd did not make; nothing changed."""
    MOUNT_FAILED = "mount_failed"
    """422: the share could not be mounted, or the backup account could not write to it; nothing written."""
    MOUNT_BUSY = "mount_busy"
    """422: the share could not be unmounted (in use); nothing was removed."""
    INTERNAL_ERROR = "internal_error"
    """500: a fault in hostd itself (its journal has the details)."""

    @property
    def http_status(self) -> int:
        """The HTTP status hostd answers this code with."""
        return _HTTP_STATUS[self]


_HTTP_STATUS: Final = {
    HostdErrorCode.INVALID_REQUEST: 422,
    HostdErrorCode.DENIED: 403,
    HostdErrorCode.CONFIRM: 403,
    HostdErrorCode.NOT_FOUND: 404,
    HostdErrorCode.METHOD_NOT_ALLOWED: 405,
    HostdErrorCode.EXISTS: 409,
    HostdErrorCode.UNIT_UNAVAILABLE: 409,
    HostdErrorCode.ACTION_FAILED: 502,
    HostdErrorCode.GPU_UNAVAILABLE: 503,
    HostdErrorCode.MOUNT_CONFLICT: 409,
    HostdErrorCode.MOUNT_FAILED: 422,
    HostdErrorCode.MOUNT_BUSY: 422,
    HostdErrorCode.INTERNAL_ERROR: 500,
}


class HostdErrorDetail(WireModel):
    """The inner object of a hostd refusal.

    Attributes:
        code: a :class:`HostdErrorCode` value (text, so a newer hostd's code still reads).
        message: what went wrong, for people.
        field: the offending field, for ``invalid_request``.
        pattern: the deny pattern, for ``denied``.
    """

    code: str
    message: str
    field: str | None = None
    pattern: str | None = None


class HostdErrorBody(WireModel):
    """Every hostd error response: ``{"error": {"code", "message"[, "field"][, "pattern"]}}``."""

    error: HostdErrorDetail


def hostd_error_body(
    code: HostdErrorCode, message: str, *, field: str | None = None, pattern: str | None = None
) -> dict[str, Any]:
    """The JSON body of a hostd refusal (send it with ``code.http_status``)."""
    error = HostdErrorDetail(code=code.value, message=message, field=field, pattern=pattern)
    return HostdErrorBody(error=error).to_wire()
