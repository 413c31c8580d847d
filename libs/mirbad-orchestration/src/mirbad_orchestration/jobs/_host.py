"""What a job needs from the master: the model's target, its node's models, telemetry and GPUs.

The job service is written against :class:`JobHost`, so the master adapts its registry, status cache,
endpoint resolver and telemetry collector, and a test passes a hand-written fake.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from mirbad_orchestration.benchmarks import ChatEndpoint
from mirbad_protocol import GpuMemory, ModelMetrics, ModelState

__all__ = ["JobHost", "JobTarget", "NodeModel"]


@dataclass(frozen=True)
class JobTarget:
    """The model a job measures, as the fleet sees it now.

    Attributes:
        model_id: the registry id.
        served_name: its served name.
        node_id: the node it is placed on (or runs on).
        runtime: its runtime.
        state: its state now.
        error: why it failed, when it did.
        endpoint: where it answers while Ready.
        max_model_len: its context length, when known.
        config_hash: the running instance's config hash, as its node reports it.
        restart_pending: whether the instance runs other settings than the saved ones.
        settings: the arguments the running instance was launched with (read back by its node, else built).
        max_num_seqs: its max num seqs (the top level of a preset's short chat), when known.
        tags: its tags (``embedding``, ``reranker`` ... tell pooling models apart).
    """

    model_id: str
    served_name: str
    node_id: str
    runtime: str
    state: ModelState
    error: str | None = None
    endpoint: ChatEndpoint | None = None
    max_model_len: int | None = None
    config_hash: str | None = None
    restart_pending: bool = False
    settings: list[str] = field(default_factory=list)
    max_num_seqs: int | None = None
    tags: tuple[str, ...] = ()

    @property
    def ready(self) -> bool:
        """Whether it can be measured: Ready with an endpoint."""
        return self.state is ModelState.READY and self.endpoint is not None


@dataclass(frozen=True)
class NodeModel:
    """A model placed on a node."""

    model_id: str
    served_name: str
    ready: bool


class JobHost(ABC):
    """The master's side of a job."""

    @abstractmethod
    async def target(self, model_id: str) -> JobTarget:
        """The model now.

        Raises:
            UnknownModelError: no such model (it may have been deleted).
        """

    @abstractmethod
    async def node_models(self, node_id: str) -> list[NodeModel]:
        """Every model placed on ``node_id``."""

    @abstractmethod
    def latest_metrics(self, model_id: str) -> ModelMetrics | None:
        """The newest telemetry sample of ``model_id``, if any."""

    @abstractmethod
    async def gpus(self, node_id: str) -> list[GpuMemory]:
        """A fresh reading of ``node_id``'s discrete GPUs with their utilization (``[]``: it has none).

        Asked of the node itself on each call (the GPU check samples it every second), not taken from
        telemetry.

        Raises:
            MirbadError: the node cannot be asked, or cannot read its GPUs (the message says why).
        """
