"""The local llama-server's build on the Nodes page: building (so far, phase, time left), ready, failed.

A first ``mirbad up`` from ``dev.py up`` serves the portal while llama-server is still compiling (see
:mod:`mirbad_master._llama_server_build`); this line says how far it is, so nobody wonders why the
llama.cpp runtime catalogues nothing yet. The node cards are read again every few seconds, and the line
with them. A llama.cpp model's card on the Models page says the same where the build is what it waits
for , and the "catalogues no llama-server" hint only where nothing
builds one (``_llama_server_hint``).
"""

from __future__ import annotations

from typing import Final

from nicegui import ui

from mirbad_master._llama_server_build import LlamaServerBuild

from ._marks import code_block, testid

__all__ = ["BUILD_COLOURS", "BUILD_LINE_ID", "render_llama_server_build"]

BUILD_LINE_ID: Final = "llama-server-build"
"""The ``data-testid`` of the build's line."""
BUILD_COLOURS: Final = {"building": "text-info", "ready": "text-positive", "failed": "text-negative"}
"""The text colour of each build state."""
_ICONS: Final = {"building": "construction", "ready": "check_circle", "failed": "error"}


def render_llama_server_build(build: LlamaServerBuild | None) -> None:
    """The build's line, a progress bar while it builds, the log's tail if it failed (or nothing)."""
    if build is None:
        return
    status = build.status()
    with ui.row().classes("items-center gap-2"):
        ui.icon(_ICONS[status.state], size="xs").classes(BUILD_COLOURS[status.state])
        line = ui.label(status.describe()).classes(f"text-body2 {BUILD_COLOURS[status.state]}")
        testid(line, BUILD_LINE_ID)
    if status.state == "building":
        ui.linear_progress(status.share, show_value=False).props("rounded color=info")
    elif status.state == "failed" and status.log_tail:
        code_block("\n".join(status.log_tail), language=None).classes("w-full")
