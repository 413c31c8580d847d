"""The backup destination in the portal: the share's form with Test, Apply and Disconnect, and its status.

The Backup & restore page embeds :func:`render_backup_destination`, so it is the room's public portal
part. Every change goes through the room's :mod:`.actions` as the portal's administrator (the API's
path: the same checks, refusals and audit lines), and a refusal is shown as ``/api`` words it, a bad
field under its input. The password field is emptied once the share is applied or tested: the page
never keeps or shows it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from nicegui import ui
from nicegui.elements.mixins.validation_element import ValidationElement

from mirbad_master._composition import MasterServices
from mirbad_master.exceptions import ApiError
from mirbad_master.ui._marks import testid
from mirbad_master.ui._refusals import PORTAL_ACTOR, act, refusal_text, show_under_field
from mirbad_protocol.hostd import BACKUP_SHARE_KINDS, BackupShare

from . import actions
from ._views import DestinationStatus

__all__ = ["destination_text", "render_backup_destination", "share_form_body"]


def destination_text(status: DestinationStatus) -> str:
    """One line on the destination: mounted where and how full, not mounted, or why it is unknown."""
    mount = status.mount
    if not status.available or mount is None:
        return f"Backup share unavailable: {status.reason or 'the local node did not answer'}"
    if not mount.configured:
        return f"No backup share: backups stay in the local folder ({mount.target})"
    if not mount.mounted or not mount.network:
        return f"The backup share {mount.source or ''} is configured but not mounted at {mount.target}"
    free = f", {mount.free_bytes / 1024**3:.1f} GiB free" if mount.free_bytes is not None else ""
    return f"Backups go to {mount.source} ({mount.fs_type}) at {mount.target}{free}"


def share_form_body(fields: dict[str, str]) -> dict[str, Any]:
    """The share's body from the form's texts: blank optional fields left out, nfs without an account."""
    body: dict[str, Any] = {name: value.strip() for name, value in fields.items() if name != "password"}
    body["password"] = fields.get("password", "")
    if body.get("kind") == "nfs":
        for name in ("username", "password", "domain"):
            body.pop(name, None)
    return {name: value for name, value in body.items() if value != ""}


def render_backup_destination(services: MasterServices) -> None:
    """The destination card: its status line and the share's form with Test, Apply and Disconnect."""
    with testid(ui.card().classes("w-full"), "backup-destination"):
        ui.label("Backup destination").classes("text-h6")
        status_line = testid(ui.label(""), "backup-destination-status")
        with ui.grid(columns=2).classes("w-full gap-x-4"):
            kind = testid(ui.select(list(BACKUP_SHARE_KINDS), value="cifs", label="Kind"), "share-kind")
            inputs = {
                "server": testid(ui.input("Server"), "share-server"),
                "share": testid(ui.input("Share (cifs) or export (nfs)"), "share-share"),
                "username": testid(ui.input("Account (cifs)"), "share-username"),
                "password": testid(ui.input("Password (cifs)", password=True), "share-password"),
                "domain": testid(ui.input("Domain (optional)"), "share-domain"),
                "version": testid(ui.input("Version (optional)"), "share-version"),
            }

        def body() -> dict[str, Any]:
            texts = {name: str(field.value or "") for name, field in inputs.items()}
            return share_form_body({"kind": str(kind.value), **texts})

        async def refresh() -> None:
            status_line.text = destination_text(await actions.destination(services))

        fields: dict[str, ValidationElement[Any]] = {"kind": kind, **inputs}

        async def change(what: Callable[[BackupShare], Awaitable[object]], done: str) -> None:
            for field in fields.values():
                field.error = None
            try:
                await what(actions.checked_share(body()))
            except Exception as exc:  # a bad field under its input, any other refusal notified
                _under_field(exc, fields)
                return
            ui.notify(done, type="positive")
            inputs["password"].value = ""

        async def test() -> None:
            await change(
                lambda share: actions.test_destination(services, share, PORTAL_ACTOR), "The share works"
            )

        async def apply() -> None:
            await change(lambda share: actions.apply_destination(services, share, PORTAL_ACTOR), "Applied")
            await refresh()

        async def disconnect() -> None:
            await act(actions.disconnect_destination(services, PORTAL_ACTOR), done="Disconnected")
            await refresh()

        with ui.row():
            testid(ui.button("Test", on_click=test), "share-test")
            testid(ui.button("Apply", on_click=apply), "share-apply")
            testid(
                ui.button("Disconnect", on_click=disconnect).props("flat color=negative"), "share-disconnect"
            )
        ui.timer(0.1, refresh, once=True)


def _under_field(exc: Exception, fields: Mapping[str, ValidationElement[Any]]) -> None:
    # The master's check and hostd's answer name the field in an ApiError: shown under that input
    # as /api words it ("server: ..."); anything else notified.
    field = exc.field if isinstance(exc, ApiError) else None
    target = fields.get(field) if field is not None else None
    if target is None:
        show_under_field(exc, fields)
        return
    target.error = refusal_text(exc)
