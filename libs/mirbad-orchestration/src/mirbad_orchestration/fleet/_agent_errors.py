"""How the agent client turns transport failures and agent refusals into the node exceptions.

Kept apart from the client so the whole mapping reads in one place: the admin API maps these exceptions
to HTTP statuses in turn (unreachable 503, timeout 504, conflicts 409, rejected specs 422 ...).
"""

from __future__ import annotations

from typing import Final

import httpx
from pydantic import ValidationError

from mirbad_orchestration.exceptions import (
    AgentAdmissionRefusedError,
    AgentFencedError,
    AgentLaunchRejectedError,
    AgentProtocolError,
    AgentRequestError,
    AgentStartConflictError,
    ModelNotOnNodeError,
    NodeError,
    NodeIdentityError,
    NodeTimeoutError,
    NodeUnreachableError,
)
from mirbad_protocol.agent import AgentErrorBody, AgentErrorCode

from ._agent_tls import WrongAgentCertificateError

__all__: list[str] = []

_REFUSALS: Final[dict[str, type[AgentRequestError]]] = {
    AgentErrorCode.SPEC_REJECTED.value: AgentLaunchRejectedError,
    AgentErrorCode.ADMISSION_REFUSED.value: AgentAdmissionRefusedError,
    AgentErrorCode.START_CONFLICT.value: AgentStartConflictError,
}


def transport_error(node_id: str, agent_url: str, exc: httpx.HTTPError) -> NodeError:
    """The node exception for an exchange that failed below HTTP (or produced an unreadable answer)."""
    where = f"node {node_id!r} ({agent_url})"
    wrong = _wrong_certificate(exc)
    if wrong is not None:
        return NodeIdentityError(node_id, f"{where} refused: {wrong.args[0]}")
    # A connect timeout means nothing answers at that address: the node is down, not slow.
    if isinstance(exc, httpx.TimeoutException) and not isinstance(exc, httpx.ConnectTimeout):
        return NodeTimeoutError(node_id, f"{where} did not answer in time ({type(exc).__name__})")
    if isinstance(exc, httpx.TransportError):
        return NodeUnreachableError(node_id, f"{where} is unreachable: {exc or type(exc).__name__}")
    return AgentProtocolError(node_id, f"{where} answered unreadably: {exc}")


def refusal_error(node_id: str, answer: httpx.Response, model_id: str | None) -> AgentRequestError:
    """The exception for an error answer, chosen by its envelope's code (read body first)."""
    try:
        error = AgentErrorBody.model_validate_json(answer.content).error
    except ValidationError:
        text = answer.text.strip()[:200] or answer.reason_phrase
        return AgentRequestError(node_id, answer.status_code, None, f"HTTP {answer.status_code}: {text}")
    if error.code == AgentErrorCode.MODEL_NOT_FOUND.value and model_id is not None:
        return ModelNotOnNodeError(node_id, model_id, error.message)
    if error.code == AgentErrorCode.FENCED.value:
        return AgentFencedError(node_id, answer.status_code, error.message, error.epoch, error.request_epoch)
    kind = _REFUSALS.get(error.code, AgentRequestError)
    return kind(node_id, answer.status_code, error.code, error.message, error.field, pattern=error.pattern)


def _wrong_certificate(exc: BaseException) -> WrongAgentCertificateError | None:
    # httpx wraps httpcore's ConnectError, which wraps the TLS error raised in the handshake.
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None or isinstance(seen, WrongAgentCertificateError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None
