"""mirbad_agent: the Mirbad node agent (mutual TLS on port 9443, routes under /agent/v1).

The agent composes every driver its machine supports (vLLM containers through Docker, llama-server
and MLX as native processes), admits each start against the node's memory, adopts what a previous
agent left running, keeps a telemetry ring of every Ready model's metrics, lists model folders, reads
GGUF headers and proxies requests to the models. :func:`create_app` builds the Starlette application
over :class:`AgentServices`; :func:`compose_services` builds those from :class:`AgentSettings`.
"""

# First: it keeps httpx from importing its command line (see the module).
from . import _no_httpx_cli  # noqa: F401
from ._app import create_app
from ._boot import boot_id, in_container
from ._compose import (
    compose_services,
    connect_docker,
    container_driver,
    platform_key_protector,
    process_driver,
)
from ._composition import AgentServices, GpuProbe, agent_version
from ._config import (
    SETTINGS_FILE_NAME,
    AgentSettings,
    DockerSettings,
    DownloadSettings,
    ExecutableSettings,
    ProcessSettings,
    default_settings_file,
    default_state_dir,
    load_settings,
    read_settings_file,
    validate_settings,
)
from ._downloads import download_routes, read_download_request
from ._enroll import add_enroll_arguments, run_enroll
from ._enroll_client import AGENT_TLS_STEM, EXIT_FAILED, EXIT_REFUSED, EnrollFailedError, enroll_node
from ._errors import agent_error_response, error_code_of, handle_exception
from ._executables_cli import add_executable, add_executables_arguments, run_executables, toml_string
from ._fence import FENCE_FILE_NAME, EpochFence, FenceGuard, fence_routes, is_command
from ._folders import DEFAULT_LISTING_LIMIT, ModelFolders, relative_parts
from ._host_services import HostServicesGateway, host_service_routes
from ._lifecycle import ModelLifecycle
from ._llama_server import (
    LLAMA_SERVER_NAME,
    UNKNOWN_VERSION,
    LlamaServerFinder,
    bundled_llama_server,
    find_llama_server,
    version_of,
    with_found_llama_server,
)
from ._proxy import PROXY_METHODS, RETRY_AFTER_S, ModelServer, ModelServerLookup, proxy_route
from ._proxy_paths import FORWARDED_PREFIX, checked_path, raw_tail
from ._request_log import POLL_PATHS, PROXIED_PREFIX, REQUEST_LOGGER, QuietPollFilter, quiet_polls
from ._routes_models import model_routes
from ._routes_node import node_routes
from ._runtimes import ComposedDriver, NodeRuntimes
from ._serve import STARTED_POLL_S, StopRequest, load_credentials, run_agent, serve, server_config
from ._telemetry_loop import TelemetryCollector
from ._windows_service import (
    EVENT_LOG_SOURCE,
    SERVICE_EXIT_CONFIG,
    SERVICE_EXIT_FAILED,
    SERVICE_LOG_BACKUPS,
    SERVICE_LOG_MAX_BYTES,
    SERVICE_LOG_NAME,
    SERVICE_NAME,
    START_WAIT_HINT_S,
    STOP_POLL_S,
    STOP_WAIT_MARGIN_S,
    ServiceControl,
    ServiceState,
    ServiceStatus,
    dispatch_to_scm,
    run_service,
    service_log_handler,
)
from .exceptions import (
    AgentConfigError,
    MirbadAgentError,
    PathNotFoundError,
    PathRefusedError,
    ProxyPathError,
    RequestRefusedError,
    ServiceUnsupportedError,
)

__all__ = [
    "AGENT_TLS_STEM",
    "DEFAULT_LISTING_LIMIT",
    "EVENT_LOG_SOURCE",
    "EXIT_FAILED",
    "EXIT_REFUSED",
    "FENCE_FILE_NAME",
    "FORWARDED_PREFIX",
    "LLAMA_SERVER_NAME",
    "POLL_PATHS",
    "PROXIED_PREFIX",
    "PROXY_METHODS",
    "REQUEST_LOGGER",
    "RETRY_AFTER_S",
    "SERVICE_EXIT_CONFIG",
    "SERVICE_EXIT_FAILED",
    "SERVICE_LOG_BACKUPS",
    "SERVICE_LOG_MAX_BYTES",
    "SERVICE_LOG_NAME",
    "SERVICE_NAME",
    "SETTINGS_FILE_NAME",
    "STARTED_POLL_S",
    "START_WAIT_HINT_S",
    "STOP_POLL_S",
    "STOP_WAIT_MARGIN_S",
    "UNKNOWN_VERSION",
    "AgentConfigError",
    "AgentServices",
    "AgentSettings",
    "ComposedDriver",
    "DockerSettings",
    "DownloadSettings",
    "EnrollFailedError",
    "EpochFence",
    "ExecutableSettings",
    "FenceGuard",
    "GpuProbe",
    "HostServicesGateway",
    "LlamaServerFinder",
    "MirbadAgentError",
    "ModelFolders",
    "ModelLifecycle",
    "ModelServer",
    "ModelServerLookup",
    "NodeRuntimes",
    "PathNotFoundError",
    "PathRefusedError",
    "ProcessSettings",
    "ProxyPathError",
    "QuietPollFilter",
    "RequestRefusedError",
    "ServiceControl",
    "ServiceState",
    "ServiceStatus",
    "ServiceUnsupportedError",
    "StopRequest",
    "TelemetryCollector",
    "add_enroll_arguments",
    "add_executable",
    "add_executables_arguments",
    "agent_error_response",
    "agent_version",
    "boot_id",
    "bundled_llama_server",
    "checked_path",
    "compose_services",
    "connect_docker",
    "container_driver",
    "create_app",
    "default_settings_file",
    "default_state_dir",
    "dispatch_to_scm",
    "download_routes",
    "enroll_node",
    "error_code_of",
    "fence_routes",
    "find_llama_server",
    "handle_exception",
    "host_service_routes",
    "in_container",
    "is_command",
    "load_credentials",
    "load_settings",
    "model_routes",
    "node_routes",
    "platform_key_protector",
    "process_driver",
    "proxy_route",
    "quiet_polls",
    "raw_tail",
    "read_download_request",
    "read_settings_file",
    "relative_parts",
    "run_agent",
    "run_enroll",
    "run_executables",
    "run_service",
    "serve",
    "server_config",
    "service_log_handler",
    "toml_string",
    "validate_settings",
    "version_of",
    "with_found_llama_server",
]
