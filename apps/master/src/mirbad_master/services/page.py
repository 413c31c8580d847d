"""The Services page: each node's whitelisted units and containers, and what else runs on its host.

Every change goes through the room's :mod:`.actions` as the portal's administrator, the API's own
write path (its refusals, its ``host.*`` audit line); the master (and the node's hostd after it) checks
the whitelist and the typed-name confirmations, so the page only asks for the name and shows the
refusal as ``/api`` words it. A protected service's stop, restart and autostart-off open a dialog
where the name is typed; a wrong or empty one is passed on as typed, and the refusal is what the user
sees.

The Discovered tab asks the node for every unit (``include_all``), which is the costly call: it is
loaded only while the tab is open and refreshed every :data:`DISCOVERY_REFRESH_S` seconds then.

Every node that answered gets a card: one whose hostd does not answer (the agent then offers no
``host.services``, and its ``/host`` routes answer 503 ``hostd_unavailable``) says so in a banner with
the command that installs hostd, rather than an empty list that reads as "nothing whitelisted".
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

from nicegui import ui

from mirbad_master._composition import MasterServices
from mirbad_master.ui._format import gib
from mirbad_master.ui._marks import code_block, testid
from mirbad_master.ui._portal import Portal
from mirbad_master.ui._refusals import PORTAL_ACTOR, act
from mirbad_orchestration.services import WhitelistedContainer
from mirbad_protocol import MirbadError
from mirbad_protocol.agent import ContainerService, FeatureFlag
from mirbad_protocol.hostd import DiscoveredService, HostServiceStatus, WhitelistAdd

from . import actions
from .actions import refusal_text

__all__ = [
    "DISCOVERY_REFRESH_S",
    "HOSTD_INSTALL",
    "HOSTD_MISSING",
    "SYSTEM_LABEL",
    "discovered_order",
    "listing_failure",
    "refusal_text",
    "render_services",
    "service_nodes",
]

DISCOVERY_REFRESH_S: Final = 30.0
"""How often an open Discovered tab is reloaded."""
SERVICES_REFRESH_S: Final = 10.0
"""How often the whitelisted services' states are reloaded."""
SYSTEM_LABEL: Final = "System — not manageable"
"""What a denied unit reads instead of its actions."""
HOSTD_INSTALL: Final = "sudo deploy/hostd/install-hostd.sh"
"""The one line that installs hostd on a node (from a clone; docs/hostd.md, Install)."""
HOSTD_MISSING: Final = (
    "hostd does not answer on this node, so its systemd services can be neither listed nor managed. "
    "Install it on the node (Linux with systemd) from a clone of Mirbad, as root; an agent whose hostd "
    "listens elsewhere names that socket in its hostd_socket setting (docs/hostd.md)."
)
"""What a node without hostd shows, above :data:`HOSTD_INSTALL`."""
_HOSTD_UNAVAILABLE: Final = "hostd_unavailable"
_GIB: Final = 1024**3
_MIB: Final = 1024**2

_Act = Callable[[Callable[[], Awaitable[object]] | None, str], Awaitable[None]]


def service_nodes(services: MasterServices) -> dict[str, tuple[bool, bool]]:
    """Each node that answered: whether it offers units (its hostd answers) and whether containers."""
    offered: dict[str, tuple[bool, bool]] = {}
    for state in services.cache.nodes():
        if state.info is None:
            continue  # never answered: nothing is known of its hostd yet
        features = state.info.features
        offered[state.node_id] = (
            FeatureFlag.HOST_SERVICES in features,
            FeatureFlag.HOST_CONTAINERS in features,
        )
    return dict(sorted(offered.items()))


def discovered_order(services: list[DiscoveredService]) -> list[DiscoveredService]:
    """Largest first by RAM plus GPU memory (an unknown RAM counts as none), then by unit name."""

    def weight(service: DiscoveredService) -> float:
        return (service.memory_bytes or 0) + service.gpu_memory_mib * _MIB

    return sorted(services, key=lambda s: (-weight(s), s.unit))


def listing_failure(exc: MirbadError) -> str:
    """A failed listing as the page says it: a missing hostd as such, else the refusal."""
    return HOSTD_MISSING if getattr(exc, "code", None) == _HOSTD_UNAVAILABLE else refusal_text(exc)


def _hostd_banner(node: str) -> None:
    with testid(ui.column().classes("w-full gap-1"), f"hostd-missing-{node}"):
        with ui.row().classes("items-center gap-2 no-wrap"):
            ui.icon("warning", size="sm").classes("text-warning")
            ui.label(HOSTD_MISSING).classes("text-body2")
        code_block(HOSTD_INSTALL, language="bash").classes("w-full")


def _ram(memory_bytes: int | None) -> str:
    return gib(None if memory_bytes is None else memory_bytes / _GIB, digits=2)


def _gpu(mib: float) -> str:
    return f"{mib / 1024:.2f} GiB" if mib else "—"


async def _typed_name(name: str, what: str, risks: list[str] | None = None) -> str | None:
    """Ask for ``name`` to be typed; None when cancelled.

    The dialog lives at the page's root, not in the row that opened it: the rows are rebuilt on every
    refresh, which deleted an open dialog with them.
    """
    with ui.context.client.content, ui.dialog() as dialog, testid(ui.card(), "confirm-dialog"):
        ui.label(f"{what}: type {name} to confirm.").classes("text-subtitle1")
        for risk in risks or []:
            ui.label(risk).classes("text-caption text-negative")
        typed = testid(ui.input("Service name"), "confirm-input")
        with ui.row():
            testid(ui.button("Confirm", on_click=lambda: dialog.submit(typed.value)), "confirm-ok")
            testid(ui.button("Cancel", on_click=lambda: dialog.submit(None)).props("flat"), "confirm-cancel")
    answer = await dialog
    dialog.delete()
    return answer if isinstance(answer, str) else None


async def render_services(portal: Portal) -> None:
    """The page: one card per node that reports ``host.services`` or ``host.containers``."""
    nodes = service_nodes(portal.services)
    ui.label("Services").classes("text-h5")
    if not nodes:
        ui.label("No node has answered yet.").classes("text-grey-7")
        return
    for node, (units, containers) in nodes.items():
        await _node_card(portal.services, node, units=units, containers=containers)


async def _node_card(services: MasterServices, node: str, *, units: bool, containers: bool) -> None:
    with testid(ui.card().classes("w-full gap-2"), f"services-{node}") as card:
        ui.label(node).classes("text-h6")
        if not units:
            _hostd_banner(node)
        if not units and not containers:
            return
        with ui.tabs() as tabs:
            managed_tab = ui.tab("Managed")
            discovered_tab = testid(ui.tab("Discovered"), f"discovered-tab-{node}")
        testid(tabs, f"services-tabs-{node}")
        with ui.tab_panels(tabs, value=managed_tab).classes("w-full"):
            with ui.tab_panel(managed_tab):
                managed = ui.column().classes("w-full gap-1")
            with ui.tab_panel(discovered_tab):
                discovered = testid(ui.column().classes("w-full gap-1"), f"discovered-{node}")

    async def run(action: Callable[[], Awaitable[object]] | None, done: str) -> None:
        # In the card's context, not the row's that called: a refresh during the action (the timer's,
        # another action's) deleted that row, and a notification in it failed and skipped the redraw.
        with card:
            if action is not None:  # None: a cancelled dialog, which only redraws
                await act(action(), done=done)
            await refresh()
            if tabs.value in (discovered_tab, "Discovered"):
                await load_discovered()

    drawn: list[object] = [None]  # what the rows show now

    async def refresh() -> None:
        unit_rows: list[HostServiceStatus] | str = []
        container_rows: list[tuple[WhitelistedContainer, ContainerService | None]] | str = []
        if units:
            try:
                unit_rows = (await actions.units(services, node)).services
            except MirbadError as exc:
                unit_rows = listing_failure(exc)
        if containers:
            try:
                entries, listing = await actions.containers(services, node)
                by_name = {c.name: c for c in listing.containers}
                container_rows = [(entry, by_name.get(entry.name)) for entry in entries]
            except MirbadError as exc:
                container_rows = refusal_text(exc)
        if (unit_rows, container_rows) == drawn[0]:
            # Nothing changed: rebuilding the rows anyway would only lose a click that lands on one
            # while it is being replaced (the timer's refresh runs every few seconds).
            return
        drawn[0] = (unit_rows, container_rows)
        managed.clear()
        with managed:
            for rows in (unit_rows, container_rows):
                if isinstance(rows, str):
                    ui.label(rows).classes("text-caption text-negative")
            if isinstance(unit_rows, list):
                for status in unit_rows:
                    _unit_row(services, node, status, run)
            if isinstance(container_rows, list):
                for entry, container in container_rows:
                    _container_row(services, node, entry, container, run)
            if not unit_rows and not container_rows:
                # Without hostd only containers can be whitelisted; the banner above says why.
                what = "Nothing" if units else "No container"
                ui.label(f"{what} whitelisted yet: see Discovered.").classes("text-grey-7")

    async def load_discovered() -> None:
        found: list[DiscoveredService] = []
        patterns: list[str] = []
        candidates: list[ContainerService] = []
        errors: list[str] = []
        if units:
            try:
                listing = await actions.units(services, node, include_all=True)
                found = discovered_order(listing.discovered or [])
                patterns = listing.deny_patterns or []
                errors += [e.message for e in listing.discovery_errors or []]
            except MirbadError as exc:
                errors.append(listing_failure(exc))
        if containers:
            try:
                entries, container_listing = await actions.containers(services, node)
                listed = {e.name for e in entries}
                candidates = sorted(
                    (c for c in container_listing.containers if c.name not in listed),
                    key=lambda c: (-(c.memory_bytes or 0), c.name),
                )
            except MirbadError as exc:
                errors.append(refusal_text(exc))
        discovered.clear()
        with discovered:
            if not units:
                ui.label("Host units need hostd (see above); only containers are listed here.").classes(
                    "text-caption text-grey-7"
                )
            for error in errors:
                ui.label(error).classes("text-caption text-negative")
            for service in found:
                _discovered_row(services, node, service, run)
            for container in candidates:
                _candidate_container_row(services, node, container, run)
            if patterns:
                ui.label("Deny list: " + ", ".join(patterns)).classes("text-caption text-grey-7")

    async def tab_changed() -> None:
        if tabs.value in (discovered_tab, "Discovered"):
            await load_discovered()

    async def tick() -> None:
        # Discovery asks every manager on the host: only while someone is looking at it.
        if tabs.value in (discovered_tab, "Discovered"):
            await load_discovered()

    tabs.on_value_change(tab_changed)
    await refresh()
    ui.timer(SERVICES_REFRESH_S, refresh, immediate=False)
    ui.timer(DISCOVERY_REFRESH_S, tick, immediate=False)


def _unit_row(services: MasterServices, node: str, status: HostServiceStatus, perform: _Act) -> None:
    entry = status.entry
    name = entry.name

    async def run(action: str) -> None:
        confirm: str | None = None
        if entry.protected and action in ("stop", "restart", "disable"):
            what = {"stop": "Stop", "restart": "Restart", "disable": "Turn autostart off for"}[action]
            confirm = await _typed_name(name, f"{what} {entry.label}", entry.risks)
            if confirm is None:
                await perform(None, "")
                return
        await perform(
            lambda: actions.unit_action(services, node, name, action, PORTAL_ACTOR, confirm=confirm),
            f"{entry.label}: {action} queued",
        )

    with testid(ui.row().classes("w-full items-center gap-3"), f"unit-{name}"):
        ui.icon("lock" if entry.protected else "settings", size="xs")
        ui.label(entry.label).classes("font-medium min-w-40")
        testid(ui.label(f"{status.active_state} ({status.sub_state})"), f"unit-state-{name}")
        ui.label(f"RAM {_ram(status.memory_bytes)}")
        ui.label(f"GPU {_gpu(status.gpu_memory_mib)}")
        if status.error:
            ui.label(status.error).classes("text-caption text-negative")
        ui.space()
        for action in ("start", "stop", "restart"):
            testid(
                ui.button(action.capitalize(), on_click=lambda a=action: run(a)).props("dense flat no-caps"),
                f"unit-{action}-{name}",
            )

        async def toggled(event: object) -> None:
            await run("enable" if switch.value else "disable")

        switch = testid(ui.switch("Autostart", value=status.autostart), f"unit-autostart-{name}")
        switch.on_value_change(toggled)


def _container_row(
    services: MasterServices,
    node: str,
    entry: WhitelistedContainer,
    container: ContainerService | None,
    perform: _Act,
) -> None:
    name = entry.name
    label = entry.display_name or name

    async def confirmation(what: str) -> tuple[bool, str | None]:
        if not entry.protected:
            return True, None
        typed = await _typed_name(name, f"{what} {label}")
        return typed is not None, typed

    async def run(action: str) -> None:
        confirm: str | None = None
        if action in ("stop", "restart"):
            go, confirm = await confirmation(action.capitalize())
            if not go:
                await perform(None, "")
                return
        await perform(
            lambda: actions.container_action(services, node, name, action, PORTAL_ACTOR, confirm=confirm),
            f"{label}: {action} done",
        )

    async def autostart(enabled: bool) -> None:
        confirm: str | None = None
        if not enabled:
            go, confirm = await confirmation("Turn autostart off for")
            if not go:
                await perform(None, "")
                return
        await perform(
            lambda: actions.container_autostart(services, node, name, enabled, PORTAL_ACTOR, confirm=confirm),
            f"{label}: autostart {'on' if enabled else 'off'}",
        )

    with testid(ui.row().classes("w-full items-center gap-3"), f"container-{name}"):
        ui.icon("lock" if entry.protected else "inventory_2", size="xs")
        ui.label(label).classes("font-medium min-w-40")
        state = container.state if container is not None else "missing"
        testid(ui.label(state), f"container-state-{name}")
        ui.label(f"RAM {_ram(container.memory_bytes if container else None)}")
        gpu_bytes = container.gpu_memory_bytes if container else None  # its processes' cgroups, summed
        ui.label(f"GPU {_gpu(gpu_bytes / _MIB if gpu_bytes else 0)}")
        ui.space()
        for action in ("start", "stop", "restart"):
            testid(
                ui.button(action.capitalize(), on_click=lambda a=action: run(a)).props("dense flat no-caps"),
                f"container-{action}-{name}",
            )

        async def toggled(event: object) -> None:
            await autostart(bool(switch.value))

        switch = testid(
            ui.switch("Autostart", value=bool(container and container.autostart)),
            f"container-autostart-{name}",
        )
        switch.on_value_change(toggled)


def _discovered_row(services: MasterServices, node: str, service: DiscoveredService, perform: _Act) -> None:
    with testid(ui.row().classes("w-full items-center gap-3"), f"discovered-unit-{service.unit}"):
        ui.label(service.unit).classes("font-medium min-w-40")
        if service.user:
            ui.label(f"user {service.user}").classes("text-caption")
        ui.label(service.active_state)
        ui.label(f"RAM {_ram(service.memory_bytes)}")
        ui.label(f"GPU {_gpu(service.gpu_memory_mib)}")
        ui.space()
        if service.denied:
            ui.label(f"{SYSTEM_LABEL} ({service.deny_pattern})").classes("text-grey-7")
        elif service.managed:
            ui.label("Whitelisted").classes("text-positive")
        else:
            name = service.unit.removesuffix(".service")

            async def add() -> None:
                typed = await _typed_name(name, f"Add {service.unit} to the whitelist")
                if typed is None:
                    return
                request = WhitelistAdd(
                    unit=service.unit, scope=service.scope, user=service.user, confirm=typed
                )
                await perform(
                    lambda: actions.add_unit(services, node, request, PORTAL_ACTOR),
                    f"{service.unit} whitelisted",
                )

            testid(
                ui.button("Add to whitelist", on_click=add).props("dense no-caps"), f"add-unit-{service.unit}"
            )


def _candidate_container_row(
    services: MasterServices, node: str, container: ContainerService, perform: _Act
) -> None:
    with testid(ui.row().classes("w-full items-center gap-3"), f"discovered-container-{container.name}"):
        ui.icon("inventory_2", size="xs")
        ui.label(container.name).classes("font-medium min-w-40")
        ui.label(container.image).classes("text-caption")
        ui.label(container.state)
        ui.label(f"RAM {_ram(container.memory_bytes)}")
        ui.space()

        async def add() -> None:
            typed = await _typed_name(container.name, f"Add container {container.name} to the whitelist")
            if typed is None:
                return
            await perform(
                lambda: actions.add_container(services, node, container.name, PORTAL_ACTOR, confirm=typed),
                f"{container.name} whitelisted",
            )

        testid(
            ui.button("Add to whitelist", on_click=add).props("dense no-caps"),
            f"add-container-{container.name}",
        )
