"""mirbad_runtime: everything node-local that the Mirbad agent uses to run models.

Drivers behind one ABC (containers through docker-py, native processes for llama-server and MLX), the
GGUF header reader, memory and GPU probes, the metrics reader and admission.
"""

from ._admission import (
    DEFAULT_START_SLOT_TIMEOUT_S,
    AdmissionController,
    AdmissionRequest,
    ModelBudget,
    check_admission,
)
from ._container_driver import ContainerDriver
from ._container_services import STATS_CONCURRENCY, ContainerServices, is_host_service_container
from ._container_spec import MODEL_LABEL, ContainerDriverConfig, container_name
from ._docker_gateway import DEFAULT_DOCKER_SOCKET, probe_docker_socket
from ._dpapi_keys import Dpapi, DpapiInstanceKeyProtector
from ._driver import FAILURE_LOG_LINES, RuntimeDriver
from ._executables import CatalogedExecutable, ExecutableCatalog, is_executable_name, sha256_of_file
from ._gguf import aread_gguf_info, read_gguf_info
from ._gpu_attribution import GpuOwner, container_gpu_bytes, model_gpu_bytes, parent_pid, service_gpu_memory
from ._gpu_processes import (
    GpuComputeProcess,
    GpuProcessProbe,
    GpuProcessReading,
    GpuProcessSource,
    HostdGpuProcessProbe,
    NvidiaSmiProcessProbe,
    PreferredGpuProcessProbe,
    nvidia_gpu_present,
)
from ._hostd_client import DEFAULT_HOSTD_SOCKET, HostdClient
from ._images import NodeImages, is_vllm_image
from ._instance_keys import FileInstanceKeyProtector, InstanceKeyProtector, new_instance_key
from ._memory_probe import DEFAULT_FAKE_TOTAL_GIB, MEMINFO_PATH, MemoryProbe, parse_meminfo
from ._memory_usage import PROC_ROOT, container_memory_bytes, parse_vm_rss, process_rss_bytes
from ._metrics_reader import METRIC_SERIES, parse_metrics, scrape, with_rates
from ._nvidia_smi import NVIDIA_SMI_ARGS, NvidiaSmiProbe, parse_gpu_rows
from ._process_driver import ProcessDriver
from ._process_host import ProcessHost, ProcessIdentity, platform_process_host
from ._process_host_posix import PosixProcessHost
from ._process_host_windows import WindowsProcessHost
from ._process_launch import ProcessDriverConfig, gpu_environment
from ._process_records import ProcessRecord, ProcessRecordStore
from ._pull_progress import PullProgress
from ._telemetry import DEFAULT_RING_CAPACITY, TelemetryRing
from .exceptions import (
    GgufFormatError,
    ImagePullError,
    LaunchRejectedError,
    MirbadRuntimeError,
    ModelNotFoundError,
    RuntimeUnavailableError,
)

__all__ = [
    "DEFAULT_DOCKER_SOCKET",
    "DEFAULT_FAKE_TOTAL_GIB",
    "DEFAULT_HOSTD_SOCKET",
    "DEFAULT_RING_CAPACITY",
    "DEFAULT_START_SLOT_TIMEOUT_S",
    "FAILURE_LOG_LINES",
    "MEMINFO_PATH",
    "METRIC_SERIES",
    "MODEL_LABEL",
    "NVIDIA_SMI_ARGS",
    "PROC_ROOT",
    "STATS_CONCURRENCY",
    "AdmissionController",
    "AdmissionRequest",
    "CatalogedExecutable",
    "ContainerDriver",
    "ContainerDriverConfig",
    "ContainerServices",
    "Dpapi",
    "DpapiInstanceKeyProtector",
    "ExecutableCatalog",
    "FileInstanceKeyProtector",
    "GgufFormatError",
    "GpuComputeProcess",
    "GpuOwner",
    "GpuProcessProbe",
    "GpuProcessReading",
    "GpuProcessSource",
    "HostdClient",
    "HostdGpuProcessProbe",
    "ImagePullError",
    "InstanceKeyProtector",
    "LaunchRejectedError",
    "MemoryProbe",
    "MirbadRuntimeError",
    "ModelBudget",
    "ModelNotFoundError",
    "NodeImages",
    "NvidiaSmiProbe",
    "NvidiaSmiProcessProbe",
    "PosixProcessHost",
    "PreferredGpuProcessProbe",
    "ProcessDriver",
    "ProcessDriverConfig",
    "ProcessHost",
    "ProcessIdentity",
    "ProcessRecord",
    "ProcessRecordStore",
    "PullProgress",
    "RuntimeDriver",
    "RuntimeUnavailableError",
    "TelemetryRing",
    "WindowsProcessHost",
    "aread_gguf_info",
    "check_admission",
    "container_gpu_bytes",
    "container_memory_bytes",
    "container_name",
    "gpu_environment",
    "is_executable_name",
    "is_host_service_container",
    "is_vllm_image",
    "model_gpu_bytes",
    "new_instance_key",
    "nvidia_gpu_present",
    "parent_pid",
    "parse_gpu_rows",
    "parse_meminfo",
    "parse_metrics",
    "parse_vm_rss",
    "platform_process_host",
    "probe_docker_socket",
    "process_rss_bytes",
    "read_gguf_info",
    "scrape",
    "service_gpu_memory",
    "sha256_of_file",
    "with_rates",
]
