"""The fleet: the nodes, how the master reaches their agents, and what it knows of them.

:class:`NodeRegistry` keeps the nodes (``nodes.json``), :class:`EnrollmentTokens` and
:class:`Enrollment` let new ones join, :class:`AgentClient` / :class:`AgentClients` speak mutual TLS
to their agents, :class:`NodeMonitor` polls them into a :class:`StatusCache`, and
:class:`RemoteModelRuntime` (a :class:`ModelRuntime`) starts and stops models on them;
:class:`RemoteTelemetryCollector` keeps their metrics history, from which :func:`judge_progress` tells a
Stalled or Slow model. The endpoint
resolver and :func:`model_status` answer where a served name runs and in which state.
:class:`MasterIdentityStore` keeps who the master is to its fleet (instance id, fencing epoch).
"""

from ._agent_client import AgentClient, AgentTimeouts, FenceSource
from ._agent_clients import AgentClients, TransportFactory
from ._agent_tls import PooledTransportBuilder
from ._endpoint_resolver import AgentEndpoint, AgentEndpointResolver
from ._enrollment import (
    DEFAULT_TOKEN_TTL,
    ENROLLMENT_TOKENS_FILE,
    NODE_NAME_PATTERN,
    Enrollment,
    EnrollmentTokens,
)
from ._master_identity import MASTER_IDENTITY_FILE, MasterIdentity, MasterIdentityStore
from ._model_progress import ModelProgress, ProgressThresholds, judge_progress
from ._model_status import model_node, model_status
from ._node_monitor import DEFAULT_POLL_INTERVAL_S, NodeMonitor, NodeState, StatusCache
from ._nodes import (
    LOCAL_NODE_ID,
    NODE_ID_PATTERN,
    NODES_FILE_NAME,
    NodeRecord,
    NodeRegistry,
    agent_url_for,
    check_agent_url,
)
from ._remote_runtime import DEFAULT_CACHE_MAX_AGE_S, RemoteModelRuntime, launch_total_gib
from ._remote_telemetry import (
    DEFAULT_HISTORY_CAPACITY,
    DEFAULT_TELEMETRY_INTERVAL_S,
    RemoteTelemetryCollector,
)
from ._runtime import ModelRuntime, NodeView

__all__ = [
    "DEFAULT_CACHE_MAX_AGE_S",
    "DEFAULT_HISTORY_CAPACITY",
    "DEFAULT_POLL_INTERVAL_S",
    "DEFAULT_TELEMETRY_INTERVAL_S",
    "DEFAULT_TOKEN_TTL",
    "ENROLLMENT_TOKENS_FILE",
    "LOCAL_NODE_ID",
    "MASTER_IDENTITY_FILE",
    "NODES_FILE_NAME",
    "NODE_ID_PATTERN",
    "NODE_NAME_PATTERN",
    "AgentClient",
    "AgentClients",
    "AgentEndpoint",
    "AgentEndpointResolver",
    "AgentTimeouts",
    "Enrollment",
    "EnrollmentTokens",
    "FenceSource",
    "MasterIdentity",
    "MasterIdentityStore",
    "ModelProgress",
    "ModelRuntime",
    "NodeMonitor",
    "NodeRecord",
    "NodeRegistry",
    "NodeState",
    "NodeView",
    "PooledTransportBuilder",
    "ProgressThresholds",
    "RemoteModelRuntime",
    "RemoteTelemetryCollector",
    "StatusCache",
    "TransportFactory",
    "agent_url_for",
    "check_agent_url",
    "judge_progress",
    "launch_total_gib",
    "model_node",
    "model_status",
]
