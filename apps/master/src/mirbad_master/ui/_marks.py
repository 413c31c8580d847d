"""Names for elements: the ones tests look for (in the browser and in the simulation), and accessible ones."""

from __future__ import annotations

from typing import Final, TypeVar

from nicegui import ui

__all__ = ["COPY_LABEL", "code_block", "link_button", "testid"]

COPY_LABEL: Final = "Copy to the clipboard"
"""The accessible name and tooltip of a code block's copy button (an icon alone names nothing)."""

_E = TypeVar("_E", bound=ui.element)


def testid(element: _E, name: str) -> _E:
    """Name ``element`` ``name``: a ``data-testid`` attribute for Playwright, a marker for the simulation."""
    element.props["data-testid"] = name
    element.mark(name)
    return element


def code_block(content: str, *, language: str | None) -> ui.code:
    """A ``ui.code`` whose copy button says what it does to a screen reader and on hover."""
    block = ui.code(content, language=language)
    block.copy_button.props(f'aria-label="{COPY_LABEL}"')
    with block.copy_button:
        ui.tooltip(COPY_LABEL)
    return block


def link_button(text: str, href: str, *, icon: str | None = None) -> ui.button:
    """A button that is a link (``<a href>``): the browser navigates, so the history and new tabs work."""
    return ui.button(text, icon=icon).props(f"href={href}")
