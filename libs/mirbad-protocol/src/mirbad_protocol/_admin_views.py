"""What the master's admin API answers, as wire models: the master builds them, its clients read them.

Models, nodes and the fleet's status are shown with what only the master knows (restart pending,
settings a restart would change, paused crash restarts, each node's last poll). They are part of the
wire contract, so the master (which builds them) and ``mirbad_client`` (which reads them) share one
definition without either depending on the other. The admin API sends every field.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import Field, JsonValue

from ._agent import AgentInfo
from ._definition import ModelDefinition
from ._status import MemorySnapshot, ModelMetrics, ModelStatus, RouterModelStats
from ._wire import WireModel

__all__ = [
    "EnrollmentTokenIssued",
    "MaintenanceView",
    "ModelView",
    "NodeSummary",
    "RestartPause",
    "SettingChangeView",
    "StatusReport",
]


class RestartPause(WireModel):
    """Why a model's automatic restarts are paused.

    Attributes:
        model_id: the model.
        node_id: the node it crashed on.
        crashes: how many times in a row it crashed.
        last_error: what the last crash reported (the runtime's error, the tail of its log), if anything.
        paused_at: when the monitor gave up restarting it.
    """

    model_id: str
    node_id: str
    crashes: Annotated[int, Field(ge=1)]
    last_error: str | None = None
    paused_at: datetime


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
        changed_settings: the settings that differ from what the running instance runs (its command
            line as its node reports it, read back; else what this master launched it with).
        changed_settings_problem: why ``changed_settings`` cannot be complete (the running command
            line cannot be read, ...); ``None`` when it is.
        pause: why its automatic restarts are paused, when they are.
    """

    definition: ModelDefinition
    status: ModelStatus
    restart_pending: bool = False
    changed_settings: list[SettingChangeView] = Field(default_factory=list)
    changed_settings_problem: str | None = None
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
