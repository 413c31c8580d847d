"""The Audit view (``/audit``): the audit log, newest first, with the API's filters and paging.

The filters start from the address (``/audit?subject=<id>``, :func:`.views.audit_link`, what a model's
and a node's card link to) and are read through the room's :mod:`.actions`, the API's own path. A time
that does not parse is shown under its input; "Older" follows the page's cursor and "Newer" goes back
one page.
"""

from __future__ import annotations

from typing import Final

from nicegui import ui

from mirbad_master.ui._marks import testid
from mirbad_master.ui._portal import Portal
from mirbad_master.ui._refusals import show_under_field
from mirbad_protocol.admin import AuditList

from .actions import AuditFilters, audit_page

__all__ = ["AUDIT_PAGE_SIZE", "render_audit"]

AUDIT_PAGE_SIZE: Final = 25
"""Entries on one page of the view."""
_FIELDS: Final = ("actor", "action", "subject", "since", "until")
_OUTCOME_COLORS: Final = {"ok": "positive", "failed": "negative", "refused": "warning"}
# The columns' titles and widths, shared by the header and every row so they line up.
_COLUMNS: Final = (
    ("Time", "w-44"),
    ("Outcome", "w-20"),
    ("Actor", "w-40"),
    ("Action", "w-44"),
    ("Subject", "w-40"),
    ("Node", "w-24"),
    ("Detail", ""),
)


async def render_audit(portal: Portal, filters: AuditFilters) -> None:
    """The view, its filters filled in from ``filters`` (the address's query)."""
    services = portal.services
    ui.label("Audit").classes("text-h5")
    inputs: dict[str, ui.input] = {}
    with testid(ui.card().classes("w-full"), "audit-filters"), ui.row().classes("w-full items-start gap-2"):
        for name, hint in (
            ("actor", "user:admin"),
            ("action", "model.start, or model"),
            ("subject", "a model or node id"),
            ("since", "2025-03-01T09:00Z"),
            ("until", "2025-03-02"),
        ):
            field = ui.input(name.capitalize(), value=getattr(filters, name) or "", placeholder=hint)
            inputs[name] = testid(field.classes("w-44"), f"audit-{name}")
        apply_button = testid(ui.button("Filter", icon="filter_list"), "audit-apply")
    table = ui.column().classes("w-full gap-1")
    with ui.row().classes("items-center gap-2"):
        newer = testid(ui.button("Newer", icon="chevron_left").props("flat"), "audit-newer")
        older = testid(ui.button("Older", icon="chevron_right").props("flat"), "audit-older")
    # The cursors of the pages shown so far ("" for the newest), so "Newer" can step back.
    cursors: list[str] = [""]
    shown: list[AuditList] = []

    async def load(cursor: str) -> bool:
        for field in inputs.values():
            field.error = None
        current = AuditFilters(**{name: inputs[name].value for name in _FIELDS})
        try:
            page = await audit_page(services, current, limit=AUDIT_PAGE_SIZE, cursor=cursor or None)
        except Exception as exc:  # shown under its input when it names one, else notified
            show_under_field(exc, inputs)
            return False
        shown[:] = [page]
        _draw(table, page)
        older.set_enabled(page.next is not None)
        return True

    async def apply() -> None:
        if await load(""):
            cursors[:] = [""]
            newer.set_enabled(False)

    async def go_older() -> None:
        following = shown[0].next if shown else None
        if following is not None and await load(following):
            cursors.append(following)
            newer.set_enabled(True)

    async def go_newer() -> None:
        if len(cursors) > 1:
            cursors.pop()
            await load(cursors[-1])
            newer.set_enabled(len(cursors) > 1)

    apply_button.on_click(apply)
    older.on_click(go_older)
    newer.on_click(go_newer)
    for field in inputs.values():
        field.on("keydown.enter", apply)
    newer.set_enabled(False)
    await apply()


def _draw(table: ui.column, page: AuditList) -> None:
    table.clear()
    with table:
        if not page.entries:
            testid(ui.label("No audit entries match."), "audit-empty").classes("text-grey-7")
            return
        with ui.row().classes("w-full items-center gap-3 no-wrap text-caption text-grey-7"):
            for title, width in _COLUMNS:
                ui.label(title).classes(width)
        widths = [width for _, width in _COLUMNS]
        for entry in page.entries:
            with testid(ui.row().classes("w-full items-center gap-3 no-wrap"), "audit-entry"):
                ui.label(entry.at.strftime("%Y-%m-%d %H:%M:%S UTC")).classes(f"{widths[0]} text-caption")
                with ui.element("div").classes(widths[1]):
                    ui.badge(entry.outcome, color=_OUTCOME_COLORS[entry.outcome])
                ui.label(entry.actor).classes(f"{widths[2]} font-medium")
                ui.label(entry.action).classes(f"{widths[3]} font-mono")
                testid(ui.label(entry.target), "audit-target").classes(widths[4])
                ui.label(entry.node_id or "").classes(f"{widths[5]} text-grey-7")
                ui.label(entry.detail or "").classes("text-grey-7 ellipsis")
