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
from ._container_spec import MODEL_LABEL, ContainerDriverConfig, container_name
from ._driver import RuntimeDriver
from ._gguf import aread_gguf_info, read_gguf_info
from ._memory_probe import DEFAULT_FAKE_TOTAL_GIB, MEMINFO_PATH, MemoryProbe, parse_meminfo
from ._metrics_reader import METRIC_SERIES, parse_metrics, scrape, with_rates
from ._nvidia_smi import NVIDIA_SMI_ARGS, NvidiaSmiProbe, parse_gpu_rows
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
    "DEFAULT_FAKE_TOTAL_GIB",
    "DEFAULT_RING_CAPACITY",
    "DEFAULT_START_SLOT_TIMEOUT_S",
    "MEMINFO_PATH",
    "METRIC_SERIES",
    "MODEL_LABEL",
    "NVIDIA_SMI_ARGS",
    "AdmissionController",
    "AdmissionRequest",
    "ContainerDriver",
    "ContainerDriverConfig",
    "GgufFormatError",
    "ImagePullError",
    "LaunchRejectedError",
    "MemoryProbe",
    "MirbadRuntimeError",
    "ModelBudget",
    "ModelNotFoundError",
    "NvidiaSmiProbe",
    "RuntimeDriver",
    "RuntimeUnavailableError",
    "TelemetryRing",
    "aread_gguf_info",
    "check_admission",
    "container_name",
    "parse_gpu_rows",
    "parse_meminfo",
    "parse_metrics",
    "read_gguf_info",
    "scrape",
    "with_rates",
]
