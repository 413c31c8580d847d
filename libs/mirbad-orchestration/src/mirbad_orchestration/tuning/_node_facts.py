"""What a model's node says of its files before a run: the checkpoint's shape and the gates' inputs.

One reader, one read of the model's folder per run (:class:`FleetNodeFacts`): a GGUF file's header,
or a Hugging Face folder's ``config.json`` and weights' size through the agent's model-config route.
The shape decides the KV gate; for a preset run of a vLLM model the same answer feeds the preset
search's gates (MTP layers, architectures, Mamba keys, experts, the weights' format), and the draft
model's ``config.json`` is read besides when the saved speculative config names one: as a folder
under the node's model roots, else, for a hub id (``org/name``), as its Hugging Face cache folder
``models--org--name`` (the agent resolves its ``refs/main`` snapshot). A drafter the node does not
have leaves its block size unknown with a note saying why. A node that cannot say (an older agent, a
missing file) leaves a gate unknown: the run goes on with what is proven without it, noted on the run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Final, Protocol

from mirbad_orchestration.fleet import AgentClient, AgentClients, NodeRegistry
from mirbad_orchestration.jobs import JobTarget
from mirbad_protocol import MirbadError, ModelDefinition
from mirbad_protocol.agent import ModelConfigInfo

from ._dimensions import ModelShape, kv_auto_fits
from ._gates import weights_format
from ._preset_search import GateInputs

__all__ = ["FleetNodeFacts", "NodeFacts", "NodeFactsReader", "hub_cache_folder"]

_HUB_ID: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class NodeFacts:
    """What the node said (None: it could not say, or it was not asked).

    Attributes:
        shape: the checkpoint's shape (the KV gate).
        gates: the preset search's gates' inputs (asked for a preset run of a vLLM model only).
    """

    shape: ModelShape | None = None
    gates: GateInputs | None = None


class NodeFactsReader(Protocol):
    """Reads a model's :class:`NodeFacts` on its node; ``gates`` asks for the preset gates' inputs too."""

    async def __call__(self, target: JobTarget, saved: ModelDefinition, *, gates: bool) -> NodeFacts:
        """See the class."""


def hub_cache_folder(model: str) -> str | None:
    """The Hugging Face cache folder of the hub id ``model`` (``org/name`` → ``models--org--name``).

    None when ``model`` is not a hub id (a path of more segments, an absolute path).
    """
    if not _HUB_ID.match(model):
        return None
    org, name = model.split("/")
    return f"models--{org}--{name}"


class FleetNodeFacts:
    """Reads a model's :class:`NodeFacts` on its node through the agent (see the module).

    Args:
        nodes: the node registry.
        clients: the agent clients.
    """

    def __init__(self, nodes: NodeRegistry, clients: AgentClients) -> None:
        self._nodes = nodes
        self._clients = clients

    async def __call__(self, target: JobTarget, saved: ModelDefinition, *, gates: bool) -> NodeFacts:
        """The shape of ``saved``'s checkpoint and, with ``gates``, the preset gates' inputs."""
        try:
            client = self._clients.client_for(await self._nodes.get(target.node_id))
            if saved.model_path.lower().endswith(".gguf"):
                # The registry's tags decide a GGUF file's preset gates: it has no config.json.
                return NodeFacts(ModelShape.from_gguf(await client.gguf_inspect(saved.model_path)))
            info = await client.model_config(saved.model_path)
        except MirbadError:
            return NodeFacts()  # the gates are then unknown: the run goes on with what is proven
        weights = info.weights_bytes or None
        shape = ModelShape.from_config(info.config, weights_bytes=weights)
        if not gates:
            return NodeFacts(shape)
        drafter, why = await self._drafter(client, saved)
        inputs = replace(
            GateInputs.from_tags(saved),
            config=info.config,
            drafter_config=drafter.config if drafter is not None else None,
            drafter_unknown=why,
            weights_bytes=weights,
            weights_format=weights_format(info.config),
            kv_auto_fits=kv_auto_fits(saved, shape),
        )
        return NodeFacts(shape, inputs)

    @staticmethod
    async def _drafter(
        client: AgentClient, saved: ModelDefinition
    ) -> tuple[ModelConfigInfo | None, str | None]:
        """The draft model's folder (a path under the roots, else a hub id's cache), or why it is unknown."""
        spec = saved.speculative
        if spec is None or spec.model is None or spec.method == "mtp":
            return None, None
        tried = [spec.model]
        cached = hub_cache_folder(spec.model)
        if cached is not None:
            tried.append(cached)
        errors = []
        for path in tried:
            try:
                return await client.model_config(path), None
            except MirbadError as exc:
                errors.append(str(exc))
        where = "under a model root" + (" or in its Hugging Face cache" if cached is not None else "")
        return None, f"the drafter {spec.model!r} is not on the node {where} ({errors[-1]})"
