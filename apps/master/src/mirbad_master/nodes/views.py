"""What a page may read about a node's executables: whether it lacks llama-server, and how to fix that.

The Nodes page says it on the node's card; the Models page and the model editor say it where a llama.cpp
model meets such a node.
"""

from __future__ import annotations

from typing import Final

from mirbad_protocol.agent import AgentInfo, ProcessRuntimeInfo

__all__ = ["CATALOGUE_FIX", "catalogue_hint", "lacks_llama_server"]

CATALOGUE_FIX: Final = (
    "run `mirbad-agent executables add PATH` on the node (a fleet of one: `mirbad up` catalogues "
    "the llama-server on its PATH or in MIRBAD_LLAMA_SERVER; a first `dev.py up` builds one in the "
    "background, its progress on the Nodes page)"
)
"""How a node's empty llama-server catalogue is filled."""


def lacks_llama_server(info: AgentInfo | None) -> bool:
    """Whether a node that answered catalogues no llama-server, so no llama.cpp model can start there."""
    if info is None:
        return False  # not read yet: nothing is known to be missing
    return not any(
        isinstance(runtime, ProcessRuntimeInfo) and runtime.runtime == "llamacpp" and runtime.executables
        for runtime in info.runtimes
    )


def catalogue_hint(node_id: str) -> str:
    """What the portal says where a llama.cpp model meets a node without a llama-server."""
    return f"Node {node_id} catalogues no llama-server: {CATALOGUE_FIX}."
