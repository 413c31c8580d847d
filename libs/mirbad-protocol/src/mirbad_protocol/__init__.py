"""mirbad_protocol: the wire contract shared by every Mirbad process.

Pydantic models (camelCase JSON on the wire, snake_case in Python, unknown fields tolerated, defaults
omitted), the routes and envelopes of each conversation between processes, and the exception root of
every Mirbad library.

The root holds the core: what every side of the fleet speaks, whichever conversation it is in.

- :class:`WireModel` and its field rules (:data:`USER_INPUT`, :func:`check_storable_text`, ...);
- the model definition and its ids (:class:`ModelDefinition`, :data:`MODEL_ID_PATTERN`, ...);
- what a node reports of a model (:class:`ModelState`, :class:`ModelStatus`, :class:`MemorySnapshot`,
  :class:`ModelMetrics`, ...) and what a model runs as (:class:`LaunchSpec` and its two kinds);
- the one exceptions tree (:class:`MirbadError` and below, also :mod:`mirbad_protocol.exceptions`).

Everything else belongs to one conversation and is imported from its public submodule:
:mod:`~mirbad_protocol.admin` (the master's ``/api``: refusals, views, API keys),
:mod:`~mirbad_protocol.agent` (master and node agent), :mod:`~mirbad_protocol.hostd` (agent and
hostd), :mod:`~mirbad_protocol.benchmarks`, :mod:`~mirbad_protocol.tuning`,
:mod:`~mirbad_protocol.releases`, :mod:`~mirbad_protocol.downloads`,
:mod:`~mirbad_protocol.restore` (a backup's restore preview and job), :mod:`~mirbad_protocol.pki`
(certificates and enrollment) and :mod:`~mirbad_protocol.openai` (the ``/v1`` error shape). Helpers
that every process shares but that are no part of the contract (atomic files, task groups, the
nvidia-smi and cgroup readers) live in :mod:`mirbad_protocol.support`.

The rule for a new name: it goes to the root only when every side uses it whatever it talks about;
otherwise to the submodule of its conversation (a new conversation gets a new submodule). Each
``_private`` module holds one concept and belongs to exactly one public home.
"""

from ._definition import (
    MODEL_ID_PATTERN,
    USER_INPUT_LIMITS,
    ExecutableRef,
    ModelDefinition,
    ModelSource,
    Placement,
    RuntimeKind,
    SpeculativeDecoding,
)
from ._launch import ContainerLaunch, GpuSelection, LaunchSpec, ProcessLaunch
from ._status import GpuMemory, MemorySnapshot, ModelMetrics, ModelState, ModelStatus, RouterModelStats
from ._user_input import (
    USER_INPUT,
    UserCheck,
    UserMaximum,
    check_storable_text,
    is_image_reference,
    is_user_input,
    printable_name,
    unknown_field_reason,
)
from ._wire import WireModel, field_error_from_validation
from .exceptions import (
    CertificateRequestError,
    ComputeAppsFormatError,
    InsecureKeyFileError,
    InvalidFieldError,
    MirbadError,
    MirbadProtocolError,
    PinMismatchError,
    PkiError,
)

__all__ = [
    "MODEL_ID_PATTERN",
    "USER_INPUT",
    "USER_INPUT_LIMITS",
    "CertificateRequestError",
    "ComputeAppsFormatError",
    "ContainerLaunch",
    "ExecutableRef",
    "GpuMemory",
    "GpuSelection",
    "InsecureKeyFileError",
    "InvalidFieldError",
    "LaunchSpec",
    "MemorySnapshot",
    "MirbadError",
    "MirbadProtocolError",
    "ModelDefinition",
    "ModelMetrics",
    "ModelSource",
    "ModelState",
    "ModelStatus",
    "PinMismatchError",
    "PkiError",
    "Placement",
    "ProcessLaunch",
    "RouterModelStats",
    "RuntimeKind",
    "SpeculativeDecoding",
    "UserCheck",
    "UserMaximum",
    "WireModel",
    "check_storable_text",
    "field_error_from_validation",
    "is_image_reference",
    "is_user_input",
    "printable_name",
    "unknown_field_reason",
]
