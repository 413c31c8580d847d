"""The frame of every page: the header with navigation, the attention badge, the theme switch, sign-out.

The theme is remembered in a cookie the page reads when it is served, so a page never flashes the
other theme first. The badge counts the attention list and refreshes itself every few seconds.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final

from fastapi import Request
from nicegui import context, ui

from ._chart_theme import THEME_CSS
from ._fleet import fleet_snapshot
from ._marks import testid
from ._portal import Portal
from ._session import LOGOUT_PATH

__all__ = [
    "BADGE_REFRESH_S",
    "NAVIGATION",
    "THEME_COOKIE",
    "NavItem",
    "apply_theme",
    "frame",
    "is_dark",
    "page_theme",
    "theme_switch_label",
]

THEME_COOKIE: Final = "mirbad_theme"
"""The cookie holding the chosen theme (``dark`` or ``light``)."""
BADGE_REFRESH_S: Final = 5.0
"""How often the attention badge is recounted."""


@dataclass(frozen=True)
class NavItem:
    """One entry of the navigation."""

    label: str
    path: str
    icon: str


NAVIGATION: Final = (
    NavItem("Overview", "/", "dashboard"),
    NavItem("Models", "/models", "view_list"),
    NavItem("Playground", "/playground", "chat"),
    NavItem("Access", "/access", "key"),
    NavItem("Nodes", "/nodes", "dns"),
    NavItem("Services", "/services", "settings_applications"),
    NavItem("Releases", "/releases", "new_releases"),
    NavItem("Backup", "/backup", "backup"),
    NavItem("Audit", "/audit", "history"),
)
"""The portal's pages, in the header's order."""


def is_dark(request: Request) -> bool:
    """Whether the visitor chose the dark theme."""
    return request.cookies.get(THEME_COOKIE) == "dark"


def apply_theme(request: Request) -> ui.dark_mode:
    """Switch the page to the visitor's theme and return the switch."""
    return ui.dark_mode(is_dark(request))


def page_theme() -> ui.dark_mode | None:
    """The theme switch of the page being built (None outside :func:`frame`)."""
    return next((el for el in context.client.elements.values() if isinstance(el, ui.dark_mode)), None)


@contextmanager
def frame(portal: Portal, request: Request, current: str) -> Iterator[ui.column]:
    """Build the header and yield the page's content column.

    Args:
        portal: the portal.
        request: the page's request (for the theme).
        current: the path of the navigation entry to highlight.
    """
    dark = apply_theme(request)
    ui.page_title("Mirbad")
    # Quasar's red and grey captions are tuned for white: lightened on the dark theme's cards.
    ui.add_css(THEME_CSS)
    with ui.header(elevated=True).classes("items-center gap-1 px-4 py-2 bg-primary"):
        ui.link("Mirbad", "/").classes("text-h6 text-white no-underline mr-4")
        for item in NAVIGATION:
            active = "bg-white/20" if item.path == current else ""
            link = ui.link(target=item.path).classes(f"no-underline text-white rounded px-3 py-1 {active}")
            with link, ui.row().classes("items-center gap-1 no-wrap"):
                ui.icon(item.icon, size="xs")
                ui.label(item.label)
        ui.space()
        badge = _attention_badge()
        _theme_button(dark)
        # A form posting to /logout: signing out changes state, so it is never a GET a link could trigger.
        with ui.element("form").props(f"method=post action={LOGOUT_PATH}"):
            sign_out = ui.button("Sign out", icon="logout").props(
                "type=submit flat dense no-caps color=white"
            )
            testid(sign_out, "logout")
    with ui.column().classes("w-full max-w-screen-xl mx-auto p-4 gap-4") as body:
        yield body

    async def recount() -> None:
        count = len((await fleet_snapshot(portal.services)).attention)
        badge.set_text(str(count))
        badge.set_visibility(count > 0)

    ui.timer(BADGE_REFRESH_S, recount, immediate=True)


def _attention_badge() -> ui.badge:
    link = testid(ui.link(target="/#attention").classes("relative text-white mx-2"), "attention")
    # An icon alone says nothing to a screen reader: the link names itself.
    link.props('aria-label="Needs attention"')
    with link:
        ui.icon("notifications", size="sm")
        badge = testid(ui.badge("0", color="negative").props("floating rounded"), "attention-badge")
        ui.tooltip("Needs attention")
    badge.set_visibility(False)
    return badge


def theme_switch_label(dark: bool) -> str:
    """What the theme button does, for its tooltip and its accessible name."""
    return "Switch to the light theme" if dark else "Switch to the dark theme"


def _theme_button(dark: ui.dark_mode) -> None:
    def icon() -> str:
        return "light_mode" if dark.value else "dark_mode"

    def label() -> None:
        button.props(f'icon={icon()} aria-label="{theme_switch_label(bool(dark.value))}"')
        tooltip.set_text(theme_switch_label(bool(dark.value)))

    def toggle() -> None:
        dark.set_value(not dark.value)
        theme = "dark" if dark.value else "light"
        ui.run_javascript(
            f'document.cookie = "{THEME_COOKIE}={theme}; path=/; max-age=31536000; samesite=strict"'
        )
        label()

    button = testid(ui.button(on_click=toggle).props("flat round color=white"), "theme-toggle")
    with button:
        tooltip = ui.tooltip("")
    label()
