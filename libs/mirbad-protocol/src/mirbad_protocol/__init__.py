"""mirbad_protocol: the wire contract shared by every Mirbad process.

Pydantic models for model definitions, statuses, memory, metrics and launch specs (camelCase JSON on
the wire, snake_case in Python, unknown fields tolerated, defaults omitted), the OpenAI error shape, and
the exception root of every Mirbad library.
"""

from ._atomic import (
    DEFAULT_FILE_MODE,
    BeforeReplace,
    remove_stale_temp_files,
    write_bytes_atomic,
    write_json_atomic,
)
from ._definition import (
    MODEL_ID_PATTERN,
    ExecutableRef,
    ModelDefinition,
    ModelSource,
    Placement,
    RuntimeKind,
    SpeculativeDecoding,
)
from ._gguf import GgufInfo
from ._launch import ContainerLaunch, GpuSelection, LaunchSpec, ProcessLaunch
from ._openai import OpenAIError, OpenAIErrorBody, openai_error
from ._pki import (
    CertificateIdentity,
    IpAddress,
    PrivateKey,
    certificate_identity,
    certificates_from_pem,
    certificates_to_pem,
    generate_private_key,
    private_key_from_pem,
    private_key_to_pem,
    read_certificates,
    read_private_key,
    spki_pin,
    write_certificates,
    write_private_key,
)
from ._pki_ca import (
    CA_CERTIFICATE_FILE,
    CA_KEY_FILE,
    DEFAULT_CA_VALIDITY,
    DEFAULT_LEAF_VALIDITY,
    CertificateAuthority,
)
from ._pki_csr import (
    IpNetwork,
    SanPolicy,
    certificate_request_from_pem,
    certificate_request_to_pem,
    create_certificate_request,
    requested_names,
)
from ._pki_tls import (
    CertificatesSource,
    KeySource,
    TlsCredentials,
    client_context,
    peer_certificate,
    server_context,
    verify_pinned_chain,
)
from ._status import GpuMemory, MemorySnapshot, ModelMetrics, ModelState, ModelStatus, RouterModelStats
from ._wire import WireModel, field_error_from_validation
from .exceptions import (
    CertificateRequestError,
    InsecureKeyFileError,
    InvalidFieldError,
    MirbadError,
    MirbadProtocolError,
    PinMismatchError,
    PkiError,
)

__all__ = [
    "CA_CERTIFICATE_FILE",
    "CA_KEY_FILE",
    "DEFAULT_CA_VALIDITY",
    "DEFAULT_FILE_MODE",
    "DEFAULT_LEAF_VALIDITY",
    "MODEL_ID_PATTERN",
    "BeforeReplace",
    "CertificateAuthority",
    "CertificateIdentity",
    "CertificateRequestError",
    "CertificatesSource",
    "ContainerLaunch",
    "ExecutableRef",
    "GgufInfo",
    "GpuMemory",
    "GpuSelection",
    "InsecureKeyFileError",
    "InvalidFieldError",
    "IpAddress",
    "IpNetwork",
    "KeySource",
    "LaunchSpec",
    "MemorySnapshot",
    "MirbadError",
    "MirbadProtocolError",
    "ModelDefinition",
    "ModelMetrics",
    "ModelSource",
    "ModelState",
    "ModelStatus",
    "OpenAIError",
    "OpenAIErrorBody",
    "PinMismatchError",
    "PkiError",
    "Placement",
    "PrivateKey",
    "ProcessLaunch",
    "RouterModelStats",
    "RuntimeKind",
    "SanPolicy",
    "SpeculativeDecoding",
    "TlsCredentials",
    "WireModel",
    "certificate_identity",
    "certificate_request_from_pem",
    "certificate_request_to_pem",
    "certificates_from_pem",
    "certificates_to_pem",
    "client_context",
    "create_certificate_request",
    "field_error_from_validation",
    "generate_private_key",
    "openai_error",
    "peer_certificate",
    "private_key_from_pem",
    "private_key_to_pem",
    "read_certificates",
    "read_private_key",
    "remove_stale_temp_files",
    "requested_names",
    "server_context",
    "spki_pin",
    "verify_pinned_chain",
    "write_bytes_atomic",
    "write_certificates",
    "write_json_atomic",
    "write_private_key",
]
