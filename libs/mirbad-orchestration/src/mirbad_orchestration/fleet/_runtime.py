"""The master's view of a fleet's runtimes: the contract the health monitor and the admin API drive.

The master never runs a model itself: every start, stop and status read goes through a node's agent.
:class:`ModelRuntime` is what the master needs from that machinery, whatever carries it (the remote
runtime over mutual TLS in production, :class:`~mirbad_orchestration.testing.FakeRuntime` in tests).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from mirbad_orchestration.commandline import RunningLaunch
from mirbad_protocol import ModelDefinition, ModelStatus

__all__ = ["ModelRuntime", "NodeView"]


@dataclass(frozen=True)
class NodeView:
    """One node of the fleet as the master sees it right now.

    Attributes:
        node_id: the node's name in the node registry (what ``Placement.node_id`` names).
        reachable: whether its agent answered the last time it was asked; the models of an unreachable
            node are unknown, not stopped.
        boot_id: an opaque token that changes whenever the node's host boots (Linux's
            ``/proc/sys/kernel/random/boot_id``, say), so the master can tell that the models it ran
            there are gone and relaunch them; ``None`` when the agent cannot tell.
    """

    node_id: str
    reachable: bool = True
    boot_id: str | None = None


class ModelRuntime(ABC):
    """Starts, stops and observes the models of every node of one fleet.

    Model ids are unique in the fleet, so the operations that take an id find the node themselves.
    Implementations raise :class:`~mirbad_protocol.MirbadError` subclasses only, so callers never see
    transport exceptions: a node that cannot be read is a
    :class:`~mirbad_orchestration.exceptions.NodeError` (``NodeUnreachableError``, ``NodeTimeoutError``
    ...), a start the node refuses for now a ``NodeConflictError`` (memory admission, another start in
    progress).
    """

    @abstractmethod
    def node_for(self, definition: ModelDefinition) -> str:
        """The node that runs ``definition``: its placement, else the fleet's default node."""

    @abstractmethod
    async def start(self, definition: ModelDefinition, *, force: bool = False) -> ModelStatus:
        """Launch ``definition`` on its node and return the first status (usually Starting).

        A model that already runs (Starting or Ready) is left alone and its status returned. ``force``
        skips the node's memory admission.
        """

    @abstractmethod
    async def stop(self, model_id: str) -> None:
        """Stop the model wherever it runs; stopping a model that does not run does nothing."""

    @abstractmethod
    async def restart(self, definition: ModelDefinition, *, force: bool = False) -> ModelStatus:
        """Replace the running instance with one launched from ``definition`` (stop, remove, create).

        Admission counts the memory of the instance being replaced as released.
        """

    @abstractmethod
    async def status(self, model_id: str) -> ModelStatus:
        """The model's status read from its node now (Stopped when nothing runs)."""

    @abstractmethod
    async def statuses(self, node_id: str | None = None) -> list[ModelStatus]:
        """The status of every model found on one node, or on every reachable node, with ``node_id`` set.

        A model missing from the list is Stopped on the nodes that were read; nothing is said about the
        models of unreachable nodes.

        Args:
            node_id: read only this node; ``None`` reads every reachable node and skips the others.

        Raises:
            NodeError: ``node_id`` was given and that node could not be read (unreachable, timed out,
                unknown), so its models are unknown; the health monitor relies on this to never take
                a node it could not read for a node whose models all stopped.
        """

    @abstractmethod
    async def nodes(self) -> list[NodeView]:
        """Every node of the fleet, reachable or not, in node-id order."""

    async def running_launch(self, model_id: str) -> RunningLaunch | None:
        """What the running instance of ``model_id`` was launched with, for restart-pending checks.

        The default knows nothing (``None``), which makes a model whose config hash label differs from
        its definition's count as restart-pending without a second look at its argv.
        """
        return None
