"""Names for the elements tests look for, in the browser and in NiceGUI's user simulation alike."""

from __future__ import annotations

from typing import TypeVar

from nicegui import ui

__all__ = ["testid"]

_E = TypeVar("_E", bound=ui.element)


def testid(element: _E, name: str) -> _E:
    """Name ``element`` ``name``: a ``data-testid`` attribute for Playwright, a marker for the simulation."""
    element.props["data-testid"] = name
    element.mark(name)
    return element
