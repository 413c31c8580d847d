"""Why a stopped llama.cpp model's card cannot start: its node's llama-server is missing or being built.

The Models page's card says it only where it applies: on node ``local`` while ``mirbad up`` builds
llama-server, the build's own line (not "catalogues no llama-server", which would send the user to
catalogue one by hand while it is on its way); nothing once the build is ready, even before the node's
info lists the new binary; elsewhere, the catalogue hint where the node catalogues none.
"""

from __future__ import annotations

from nicegui import ui

from mirbad_master._llama_server_build import LlamaServerBuild
from mirbad_master.nodes.views import catalogue_hint, lacks_llama_server
from mirbad_master.ui._llama_server_build import BUILD_COLOURS, BUILD_LINE_ID
from mirbad_master.ui._marks import testid
from mirbad_orchestration.fleet import LOCAL_NODE_ID
from mirbad_protocol import ModelDefinition
from mirbad_protocol.agent import AgentInfo

__all__ = ["render_llama_server_hint"]


def render_llama_server_hint(
    definition: ModelDefinition,
    node_id: str | None,
    node_info: AgentInfo | None,
    build: LlamaServerBuild | None,
) -> None:
    """On a stopped llama.cpp model's card: why its node cannot start it, when that is so (or nothing).

    Args:
        definition: the model (other runtimes get nothing).
        node_id: the node it is placed on.
        node_info: that node's info, ``None`` while unread.
        build: ``mirbad up``'s llama-server build, if one (it concerns node ``local`` only).
    """
    if definition.runtime != "llamacpp":
        return
    if build is not None and node_id == LOCAL_NODE_ID:
        status = build.status()
        if status.state != "ready":
            line = ui.label(status.describe()).classes(f"text-caption {BUILD_COLOURS[status.state]}")
            testid(line, f"{BUILD_LINE_ID}-{definition.id}")
        return
    if lacks_llama_server(node_info):
        hint = ui.label(catalogue_hint(node_id or "?")).classes("text-caption text-warning")
        testid(hint, f"catalogue-hint-{definition.id}")
