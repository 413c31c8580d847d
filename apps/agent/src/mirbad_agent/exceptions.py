"""The exceptions of mirbad_agent.

The tree of its exceptions, each under its first base here (one with more bases names them all)::

    MirbadAgentError(MirbadError)
    ├── AgentConfigError(MirbadAgentError, ValueError)
    ├── RequestRefusedError
    │   └── ProxyPathError
    ├── PathRefusedError(MirbadAgentError, PermissionError)
    ├── PathNotFoundError(MirbadAgentError, FileNotFoundError)
    ├── ServiceUnsupportedError
    ├── EnrollFailedError
    ├── FencedError
    └── FenceStateError
"""

from __future__ import annotations

from pathlib import Path

from mirbad_protocol import MirbadError
from mirbad_protocol.agent import AgentErrorCode

__all__ = [
    "AgentConfigError",
    "FenceStateError",
    "FencedError",
    "MirbadAgentError",
    "PathNotFoundError",
    "PathRefusedError",
    "ProxyPathError",
    "RequestRefusedError",
    "ServiceUnsupportedError",
]


class MirbadAgentError(MirbadError):
    """Root of the exceptions of :mod:`mirbad_agent`."""


class AgentConfigError(MirbadAgentError, ValueError):
    """A configuration the agent cannot start with (a bad file, flag or credential), said in one line."""


class RequestRefusedError(MirbadAgentError):
    """A request the agent refuses with one of the contract's error codes.

    Attributes:
        code: the :class:`~mirbad_protocol.agent.AgentErrorCode` (it decides the HTTP status).
        message: what went wrong.
        field: the body field or query parameter at fault, when there is one.
    """

    def __init__(self, code: AgentErrorCode, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field


class PathRefusedError(MirbadAgentError, PermissionError):
    """A path under the model roots the agent will not follow: absolute, ``..``, or leading out.

    Attributes:
        path: the path as the request gave it.
        reason: why it is refused.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"path {path!r} refused: {reason}")
        self.path = path
        self.reason = reason


class PathNotFoundError(MirbadAgentError, FileNotFoundError):
    """Nothing (of the kind asked for) at a path under the model roots.

    Attributes:
        path: the path as the request gave it.
        reason: what is missing.
    """

    def __init__(self, path: str, reason: str = "no such file or folder under the model roots") -> None:
        super().__init__(f"path {path!r}: {reason}")
        self.path = path
        self.reason = reason


class ProxyPathError(RequestRefusedError):
    """A path the proxy will not forward to a model's server (400 ``invalid_request``, field ``path``).

    Attributes:
        path: the path, at the decoding layer where it was refused.
        reason: why it is refused.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(AgentErrorCode.INVALID_REQUEST, f"path {path!r} refused: {reason}", field="path")
        self.path = path
        self.reason = reason


class ServiceUnsupportedError(MirbadAgentError):
    """The service mode asked for where there is no Windows Service Control Manager."""


class FencedError(MirbadAgentError):
    """A command from a master below the agent's fence (409 ``fenced``); the message names both epochs.

    Attributes:
        epoch: the highest master epoch the agent has seen.
        request_epoch: the epoch the command carried (None: it carried none).
    """

    def __init__(self, epoch: int, request_epoch: int | None, reason: str) -> None:
        carried = "no epoch" if request_epoch is None else f"epoch {request_epoch}"
        super().__init__(
            f"fenced: this node follows the master at epoch {epoch}; the command carried {carried} ({reason})"
        )
        self.epoch = epoch
        self.request_epoch = request_epoch


class FenceStateError(MirbadAgentError):
    """The agent's fence file cannot be read or written; no command runs until it can.

    Attributes:
        path: the fence file.
    """

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"the master fence {path} {reason}")
        self.path = path
