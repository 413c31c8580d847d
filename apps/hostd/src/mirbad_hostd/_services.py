"""What hostd does for each request, in the order the security model puts the checks.

Deny list first (a denied name is refused before anything is looked up), then the whitelist (an
unknown name is 404 before anything runs), then the discoverUsers rule for user units, then the
protected-service confirmation; only then does systemctl run, and it checks the deny list once more.
Every action or refusal is one log line ``action service=… unit=… action=… result=ok|failed|refused``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Final

from mirbad_protocol import InvalidFieldError
from mirbad_protocol.hostd import (
    DiscoveredService,
    DiscoveryError,
    GpuProcess,
    HostdAction,
    HostdActionResult,
    HostServiceStatus,
    ServiceList,
    WhitelistAdd,
    WhitelistEntry,
    WhitelistUpdate,
    service_name,
)

from ._deny import TEMPLATE_INSTANCE_PATTERN, DenyList, template_of
from ._discovery import UnitState, discover_units, read_states
from ._gpu import GpuProcesses, GpuProcessRow
from ._systemctl import Manager, Systemctl
from ._whitelist import WhitelistStore
from .exceptions import (
    ConfirmationRequiredError,
    GpuQueryError,
    HostdError,
    SystemctlError,
    UnitDeniedError,
    UnitUnavailableError,
)

__all__ = ["CONFIRMED_ACTIONS", "HostServices"]

logger = logging.getLogger(__name__)

CONFIRMED_ACTIONS: Final[frozenset[HostdAction]] = frozenset({"stop", "restart", "disable"})
"""The actions a protected service needs its typed name for (disable = autostart off)."""

_MIB: Final = 1024 * 1024


def checked_name(name: str) -> str:
    """A path's ``{name}``, checked like a unit name.

    Raises:
        InvalidFieldError: field ``name``.
    """
    try:
        return service_name(name)
    except ValueError as exc:
        raise InvalidFieldError("name", str(exc)) from None


class HostServices:
    """The whitelist, the deny list, systemctl and nvidia-smi behind hostd's routes.

    Args:
        store: the whitelist.
        deny: the deny list.
        systemctl: the systemctl runner.
        gpus: the nvidia-smi reader.
        discover_users: the users whose managers are discovered and whose units may be managed.
        show_batch: units per ``systemctl show``.
    """

    def __init__(
        self,
        store: WhitelistStore,
        deny: DenyList,
        systemctl: Systemctl,
        gpus: GpuProcesses,
        discover_users: Sequence[str],
        *,
        show_batch: int,
    ) -> None:
        self.store = store
        self.deny = deny
        self._systemctl = systemctl
        self._gpus = gpus
        self._users = tuple(discover_users)
        self._batch = show_batch

    # ---------------------------------------------------------------- actions

    async def act(self, name: str, action: HostdAction, confirm: str | None) -> HostdActionResult:
        """Run ``action`` on the whitelisted service ``name`` after every check.

        Raises:
            InvalidFieldError: a bad name, or a user unit of a user outside discoverUsers.
            UnitDeniedError: the name or its unit is denied.
            ServiceNotFoundError: not on the whitelist.
            ConfirmationRequiredError: a protected service without ``confirm=<name>``.
            ActionFailedError: systemctl failed.
        """
        unit = name
        try:
            checked_name(name)
            self.deny.check(name)
            entry = self.store.get(name)
            unit = entry.unit
            self.deny.check(entry.unit)
            self._check_template(entry.unit, entry.scope, entry.user)
            self._check_user(entry.scope, entry.user)
            if entry.protected and action in CONFIRMED_ACTIONS and confirm != entry.name:
                raise ConfirmationRequiredError(
                    f"{entry.name} is protected: {action} needs confirm={entry.name}"
                )
        except (HostdError, InvalidFieldError) as exc:
            self._log_action(name, unit, action, "refused", exc)
            raise
        try:
            await self._systemctl.act(Manager(entry.scope, entry.user), entry.unit, action)
        except HostdError as exc:
            self._log_action(
                name, unit, action, "refused" if isinstance(exc, UnitDeniedError) else "failed", exc
            )
            raise
        self._log_action(name, unit, action, "ok")
        return HostdActionResult(name=entry.name, unit=entry.unit, action=action, result="ok")

    def _check_template(self, unit: str, scope: str, user: str | None) -> None:
        """Refuse an instance unless the operator whitelisted its template on the same manager.

        Raises:
            UnitDeniedError: pattern :data:`TEMPLATE_INSTANCE_PATTERN`, naming the template.
        """
        template = template_of(unit)
        if template is not None and self.store.find_unit(template, scope, user) is None:
            raise UnitDeniedError(unit, TEMPLATE_INSTANCE_PATTERN, template=template)

    def _check_user(self, scope: str, user: str | None) -> None:
        if scope == "user" and user is None:
            raise InvalidFieldError("user", "a user unit needs its user")
        if scope == "user" and user not in self._users:
            raise InvalidFieldError("user", f"{user!r} is not one of discoverUsers {list(self._users)}")
        if scope == "system" and user is not None:
            raise InvalidFieldError("user", "only user units have a user")

    @staticmethod
    def _log_action(name: str, unit: str, action: str, result: str, reason: Exception | None = None) -> None:
        because = f" reason={str(reason)!r}" if reason is not None else ""
        level = logging.INFO if result == "ok" else logging.WARNING
        logger.log(
            level, "action service=%s unit=%s action=%s result=%s%s", name, unit, action, result, because
        )

    # ---------------------------------------------------------------- whitelist

    async def add(self, request: WhitelistAdd) -> WhitelistEntry:
        """Whitelist a discovered unit; ``confirm`` must be the name it gets.

        Raises:
            UnitDeniedError: the unit is denied (logged).
            InvalidFieldError: a user outside discoverUsers, a user on a system unit.
            ConfirmationRequiredError: ``confirm`` is not the name.
            UnitUnavailableError: not loaded with a unit file.
            ServiceExistsError: already whitelisted.
        """
        name = request.unit.removesuffix(".service")
        pattern = self.deny.match(request.unit)
        if pattern is not None:
            logger.warning(
                "whitelist add refused service=%s unit=%s: denied by %r", name, request.unit, pattern
            )
            raise UnitDeniedError(request.unit, pattern)
        try:
            self._check_template(request.unit, request.scope, request.user)
        except UnitDeniedError as exc:
            logger.warning("whitelist add refused service=%s unit=%s: %s", name, request.unit, exc)
            raise
        self._check_user(request.scope, request.user)
        if request.confirm != name:
            raise ConfirmationRequiredError(f"adding {request.unit} needs confirm={name}")
        manager = Manager(request.scope, request.user)
        (state,) = await read_states(self._systemctl, manager, [request.unit], batch=1)
        if state.load_state != "loaded" or not state.fragment_path or state.id not in {"", request.unit}:
            raise UnitUnavailableError(f"{request.unit} is not loaded with a unit file ({state.load_state})")
        entry = WhitelistEntry(
            name=name,
            unit=request.unit,
            scope=request.scope,
            user=request.user,
            display_name=request.display_name,
            description=state.description,
            protected=request.protected,
        )
        await self.store.add(entry)
        return entry

    async def update(self, name: str, request: WhitelistUpdate) -> WhitelistEntry:
        """Change an entry's display name or protection; unprotecting needs ``confirm=<name>``.

        Raises:
            InvalidFieldError: a bad name.
            ServiceNotFoundError: no such entry.
            ConfirmationRequiredError: unprotect without the typed name.
        """
        entry = self.store.get(checked_name(name))
        if request.protected is False and entry.protected and request.confirm != entry.name:
            raise ConfirmationRequiredError(f"unprotecting {entry.name} needs confirm={entry.name}")
        changes: dict[str, object] = {}
        if request.display_name is not None:
            changes["display_name"] = request.display_name
        if request.protected is not None:
            changes["protected"] = request.protected
        updated = entry.model_copy(update=changes)
        await self.store.replace(updated)
        return updated

    async def remove(self, name: str) -> WhitelistEntry:
        """Take ``name`` off the whitelist (the seed does not bring it back).

        Raises:
            InvalidFieldError: a bad name.
            ServiceNotFoundError: no such entry.
        """
        return await self.store.remove(checked_name(name))

    # ---------------------------------------------------------------- reading

    async def services(self, *, include_all: bool) -> ServiceList:
        """The whitelisted units with their state; with ``include_all`` discovery and the deny list."""
        rows = await self._gpu_rows()
        statuses = await self._statuses(self.store.entries(), rows)
        if not include_all:
            return ServiceList(services=statuses)
        discovered, errors = await self._discover(rows)
        return ServiceList(
            services=statuses,
            discovered=discovered,
            discovery_errors=errors,
            deny_patterns=list(self.deny.patterns),
        )

    async def gpu_processes(self) -> list[GpuProcess]:
        """nvidia-smi's compute processes with their container or unit.

        Raises:
            GpuQueryError: nvidia-smi failed.
        """
        rows = await self._gpus.query()
        labels = {entry.unit: entry.label for entry in reversed(self.store.entries())}
        return [
            GpuProcess(
                pid=row.pid,
                name=row.name,
                used_mib=row.used_mib,
                container_id=row.owner.container_id,
                unit=row.owner.unit,
                display_name=labels.get(row.owner.unit) if row.owner.unit else None,
            )
            for row in rows
        ]

    async def _gpu_rows(self) -> list[GpuProcessRow]:
        try:
            return await self._gpus.query()
        except GpuQueryError as exc:
            logger.debug("no GPU memory per unit: %s", exc)
            return []

    async def _statuses(
        self, entries: list[WhitelistEntry], rows: list[GpuProcessRow]
    ) -> list[HostServiceStatus]:
        by_manager: dict[Manager, list[WhitelistEntry]] = {}
        for entry in entries:
            by_manager.setdefault(Manager(entry.scope, entry.user), []).append(entry)
        statuses: dict[str, HostServiceStatus] = {}
        for manager, group in by_manager.items():
            try:
                states = await read_states(
                    self._systemctl, manager, [e.unit for e in group], batch=self._batch
                )
            except SystemctlError as exc:
                statuses.update((e.name, HostServiceStatus(entry=e, error=str(exc))) for e in group)
                continue
            for entry, state in zip(group, states, strict=True):
                statuses[entry.name] = _status(entry, state, rows)
        return [statuses[entry.name] for entry in entries]

    async def _discover(
        self, rows: list[GpuProcessRow]
    ) -> tuple[list[DiscoveredService], list[DiscoveryError]]:
        found: list[DiscoveredService] = []
        errors: list[DiscoveryError] = []
        for manager in [Manager(), *(Manager("user", user) for user in self._users)]:
            try:
                states = await discover_units(self._systemctl, manager, batch=self._batch)
            except SystemctlError as exc:
                errors.append(DiscoveryError(scope=manager.scope, user=manager.user, message=str(exc)))
                continue
            found.extend(self._discovered(state, rows) for state in states)
        found.sort(key=lambda s: (s.memory_bytes or 0) + s.gpu_memory_mib * _MIB, reverse=True)
        return found, errors

    def _discovered(self, state: UnitState, rows: Iterable[GpuProcessRow]) -> DiscoveredService:
        entry = self.store.find_unit(state.unit, state.manager.scope, state.manager.user)
        pattern = self.deny.match(state.unit)
        template = template_of(state.unit)
        if (
            pattern is None
            and template is not None
            and self.store.find_unit(template, state.manager.scope, state.manager.user) is None
        ):
            pattern = TEMPLATE_INSTANCE_PATTERN
        return DiscoveredService(
            unit=state.unit,
            scope=state.manager.scope,
            user=state.manager.user,
            description=state.description,
            load_state=state.load_state,
            active_state=state.active_state,
            sub_state=state.sub_state,
            unit_file_state=state.unit_file_state,
            memory_bytes=state.memory_bytes,
            gpu_memory_mib=_gpu_mib(state.control_group, rows),
            managed=entry is not None,
            name=entry.name if entry is not None else None,
            denied=pattern is not None,
            deny_pattern=pattern,
        )


def _status(entry: WhitelistEntry, state: UnitState, rows: Iterable[GpuProcessRow]) -> HostServiceStatus:
    return HostServiceStatus(
        entry=entry,
        load_state=state.load_state or "unknown",
        active_state=state.active_state or "unknown",
        sub_state=state.sub_state or "unknown",
        unit_file_state=state.unit_file_state,
        autostart=state.unit_file_state in {"enabled", "enabled-runtime"},
        memory_bytes=state.memory_bytes,
        gpu_memory_mib=_gpu_mib(state.control_group, rows),
        active_since=state.active_since,
    )


def _gpu_mib(control_group: str, rows: Iterable[GpuProcessRow]) -> float:
    """The GPU memory of processes whose cgroup is ``control_group`` or below it."""
    if not control_group:
        return 0.0
    prefix = control_group.rstrip("/") + "/"
    return sum(
        row.used_mib
        for row in rows
        if row.owner.path is not None
        and (row.owner.path == control_group or row.owner.path.startswith(prefix))
    )
