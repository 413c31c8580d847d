"""The master's own exceptions, in one tree.

The tree of its exceptions, each under its first base here (one with more bases names them all)::

    MasterError(MirbadError)
    ├── ChangeRefusedError
    │   ├── ModelExistsError(InvalidFieldError, ChangeRefusedError)
    │   ├── LocalNodeError
    │   ├── NodeHasModelsError
    │   └── UnknownGpuError(InvalidFieldError, ChangeRefusedError)
    ├── ApiError
    ├── NotSignedInError
    │   ├── WrongPasswordError
    │   └── TooManyAttemptsError
    ├── StartPausedError
    ├── LlamaServerNotBuiltError(NodeConflictError, MasterError)
    │   └── LlamaServerBuildingError(LlamaServerNotBuiltError, NodeNotReadyToStartError)
    ├── LocalAgentError
    └── ServeError
        ├── DataDirInUseError
        └── DataDirHoldsMasterError

``MasterError`` is a :class:`~mirbad_protocol.MirbadError`, so the admin API's handler answers every one
of them; ``_api_errors`` maps each to its status and code (the libraries' exceptions stay in their own
trees and are mapped there too).
"""

from __future__ import annotations

from pathlib import Path

from mirbad_orchestration import NodeConflictError, NodeNotReadyToStartError
from mirbad_protocol import InvalidFieldError, MirbadError
from mirbad_protocol.admin import AdminErrorCode

__all__ = [
    "ApiError",
    "ChangeRefusedError",
    "DataDirHoldsMasterError",
    "DataDirInUseError",
    "LlamaServerBuildingError",
    "LlamaServerNotBuiltError",
    "LocalAgentError",
    "LocalNodeError",
    "MasterError",
    "ModelExistsError",
    "NodeHasModelsError",
    "NotSignedInError",
    "ServeError",
    "StartPausedError",
    "TooManyAttemptsError",
    "UnknownGpuError",
    "WrongPasswordError",
]


class MasterError(MirbadError):
    """The base of every exception the master itself raises."""


class ChangeRefusedError(MasterError):
    """A change the master itself refuses (not a library's rule)."""


class ModelExistsError(InvalidFieldError, ChangeRefusedError):
    """A new model's id is taken (HTTP 409 ``model_exists``, field ``id``).

    Attributes:
        model_id: the id.
    """

    def __init__(self, model_id: str) -> None:
        super().__init__("id", f"a model with id {model_id!r} exists")
        self.model_id = model_id


class LocalNodeError(ChangeRefusedError):
    """The master's own node cannot be removed (HTTP 409 ``local_node``).

    Attributes:
        node_id: the node.
    """

    def __init__(self, node_id: str, message: str) -> None:
        super().__init__(message)
        self.node_id = node_id


class NodeHasModelsError(ChangeRefusedError):
    """Models are placed on the node to remove, and their placement was not to be cleared (HTTP 409).

    Attributes:
        node_id: the node.
    """

    def __init__(self, node_id: str, message: str) -> None:
        super().__init__(message)
        self.node_id = node_id


class UnknownGpuError(InvalidFieldError, ChangeRefusedError):
    """A placement names a GPU its node does not report (422 ``unknown_gpu``, field ``placement.gpuUuids``).

    Attributes:
        node_id: the placement's node.
        gpu_uuid: the first UUID the node does not report.
        known: the UUIDs the node reports, in its order.
    """

    def __init__(self, node_id: str, gpu_uuid: str, known: list[str]) -> None:
        listed = ", ".join(known) if known else "none: it has no discrete GPUs"
        super().__init__(
            "placement.gpuUuids", f"node {node_id!r} reports no GPU {gpu_uuid!r} (its GPUs: {listed})"
        )
        self.node_id = node_id
        self.gpu_uuid = gpu_uuid
        self.known = known


class ApiError(MasterError):
    """A refusal of the admin API itself (a mismatched id ...).

    Attributes:
        status: the HTTP status.
        code: the envelope's code.
        field: the offending field, if one.
        pattern: the deny pattern of a ``denied`` host-service refusal (the node's hostd named it).
    """

    def __init__(
        self,
        status: int,
        code: AdminErrorCode,
        message: str,
        *,
        field: str | None = None,
        pattern: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.field = field
        self.pattern = pattern


class NotSignedInError(MasterError):
    """The request is not signed in as the administrator (HTTP 401).

    The master's side of a sign-in; :class:`mirbad_client.AdminAuthError` is the admin client's
    view of the same refusal, hence the different name.
    """


class WrongPasswordError(NotSignedInError):
    """No password, a wrong one, or an unknown session."""


class TooManyAttemptsError(NotSignedInError):
    """Too many wrong passwords from this client or for the account lately (HTTP 429).

    Attributes:
        retry_after_s: seconds until the client may try again.
    """

    def __init__(self, retry_after_s: int) -> None:
        super().__init__(f"too many wrong passwords; try again in {retry_after_s} s")
        self.retry_after_s = retry_after_s


class StartPausedError(MasterError):
    """A request asked for a model whose automatic restarts are paused after repeated crashes."""


class LlamaServerNotBuiltError(NodeConflictError, MasterError):
    """A llama.cpp model was started on node ``local`` before its llama-server was built (HTTP 409)."""


class LlamaServerBuildingError(LlamaServerNotBuiltError, NodeNotReadyToStartError):
    """The build is still under way: the start will be possible once it is ready (try again later).

    The health monitor retries such a start without counting a crash; ``/v1`` answers 503 with
    ``Retry-After`` as for a model still starting.
    """


class LocalAgentError(MasterError):
    """The local agent could not be enrolled or started; the message says why (with its log's tail)."""


class ServeError(MasterError):
    """A server of the master could not listen on its port or did not start."""


class DataDirInUseError(ServeError):
    """Another ``mirbad up`` runs on this data directory."""


class DataDirHoldsMasterError(ServeError):
    """Fleet recovery was asked for on a data directory that holds another master (nothing is written).

    Attributes:
        data_dir: the directory.
        found: the master's file that was found there.
    """

    def __init__(self, data_dir: Path, found: str) -> None:
        super().__init__(
            f"the data directory {data_dir} already holds a master ({found}); recovery only writes a "
            "directory that holds none: move it aside (or give --data-dir an empty one) and run again"
        )
        self.data_dir = data_dir
        self.found = found
