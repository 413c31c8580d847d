"""What the master's admin API answers, as wire models its clients read.

Models, nodes and the fleet's status are shown with what only the master knows (restart pending,
settings a restart would change, paused crash restarts, each node's last poll), so they live here,
next to those facts, rather than in :mod:`mirbad_protocol`. The admin API sends every field.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import Field, JsonValue

from mirbad_protocol import (
    AgentInfo,
    MemorySnapshot,
    ModelDefinition,
    ModelMetrics,
    ModelStatus,
    RouterModelStats,
    WireModel,
)

from .supervision import RestartPause

__all__ = [
    "EnrollmentTokenIssued",
    "MaintenanceView",
    "ModelView",
    "NodeSummary",
    "SettingChangeView",
    "StatusReport",
]


class SettingChangeView(WireModel):
    """One setting the running instance does not have yet (``old`` is what it was launched with).

    Attributes:
        field: the definition's field, in its wire spelling.
        old: the value the instance runs with.
        new: the saved value.
        needs_restart: whether the change only takes effect after a restart.
    """

    field: str
    old: JsonValue
    new: JsonValue
    needs_restart: bool


class ModelView(WireModel):
    """A model as the admin API shows it (``GET /api/models/{id}``).

    Attributes:
        definition: the saved definition.
        status: its current status, as the master last read it from the model's node.
        restart_pending: the running instance runs another configuration than the saved one.
        changed_settings: the settings that differ from what this master launched it with.
        pause: why its automatic restarts are paused, when they are.
    """

    definition: ModelDefinition
    status: ModelStatus
    restart_pending: bool = False
    changed_settings: list[SettingChangeView] = Field(default_factory=list)
    pause: RestartPause | None = None


class NodeSummary(WireModel):
    """A registered node with what the master last learned about it (``GET /api/nodes``).

    Attributes:
        id: the node's id, named by model placements.
        name: the node's name for people.
        agent_url: where its agent answers.
        local: whether it is the node on the master's own machine.
        enrolled_at: when it joined the fleet.
        labels: free-form labels.
        reachable: whether its agent answered the last poll.
        polled_at: when it was last polled.
        last_seen: when its agent last answered.
        error: why the last poll failed.
        info: the agent's runtimes, features and model roots.
        memory: the node's memory at the last poll.
        models: the model instances found on it.
    """

    id: str
    name: str
    agent_url: str
    local: bool = False
    enrolled_at: datetime
    labels: dict[str, str] = Field(default_factory=dict)
    reachable: bool = False
    polled_at: datetime | None = None
    last_seen: datetime | None = None
    error: str | None = None
    info: AgentInfo | None = None
    memory: MemorySnapshot | None = None
    models: list[ModelStatus] = Field(default_factory=list)


class MaintenanceView(WireModel):
    """Maintenance mode while it lasts: ``/v1`` answers 503 with this message.

    Attributes:
        message: why, for people.
        retry_after_s: the seconds ``/v1`` tells clients to wait.
    """

    message: str
    retry_after_s: int


class StatusReport(WireModel):
    """The whole fleet at a glance (``GET /api/status``).

    Attributes:
        nodes: every node with its memory and models.
        models: every registered model's status.
        metrics: the latest metrics of the models that have some.
        router: the ``/v1`` router's counters per served name.
        pauses: the models whose automatic restarts are paused.
        maintenance: maintenance mode, while it lasts.
    """

    nodes: list[NodeSummary]
    models: list[ModelStatus]
    metrics: list[ModelMetrics]
    router: list[RouterModelStats]
    pauses: list[RestartPause]
    maintenance: MaintenanceView | None = None


class EnrollmentTokenIssued(WireModel):
    """A new one-time enrollment token, with the command that enrolls the node (shown once).

    Attributes:
        token: the join token.
        node_name: the name the node's certificate will carry.
        expires_at: when the token stops being accepted.
        install_command: the ``mirbad-agent enroll ...`` command to run on the node.
    """

    token: str = Field(repr=False)
    node_name: str
    expires_at: datetime
    install_command: str = Field(repr=False)
