"""The master's enroll listener: where a joining node fetches the CA and trades its token for a certificate.

It is a small Starlette app of its own, served over TLS with a certificate the fleet CA issued to the
master, and it asks the client for no certificate: a joining node has none yet, the one-time token is
what authenticates it. The node checks the CA's pin against its join token before it sends the token
(see :mod:`mirbad_protocol`'s enrollment contract), so serving the CA certificate unauthenticated is
safe: a certificate is public, and a forged one would not match the pin. Its certificate carries
:data:`~mirbad_protocol.pki.ENROLL_LISTENER_NAME`, the name the node then requires before it sends the
token, and one no node certificate can carry: an enrolled node serving this API is refused.
"""

from __future__ import annotations

import ipaddress
import logging
import ssl
from collections.abc import Iterable
from datetime import timedelta
from typing import Final

from cryptography import x509
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mirbad_orchestration import (
    EnrollmentStoreError,
    EnrollmentTokenError,
    EnrollmentTokenExpiredError,
    EnrollmentTokenUsedError,
    NodeError,
    NodeRegistryError,
    UnknownEnrollmentTokenError,
)
from mirbad_orchestration.fleet import EnrollmentTokens
from mirbad_protocol import CertificateRequestError, InvalidFieldError
from mirbad_protocol.pki import (
    DEFAULT_LEAF_VALIDITY,
    ENROLL_CA_MEDIA_TYPE,
    ENROLL_CA_PATH,
    ENROLL_LISTENER_NAME,
    ENROLL_PATH,
    CertificateAuthority,
    EnrollErrorCode,
    EnrollRequest,
    EnrollResponse,
    IpAddress,
    SanPolicy,
    TlsCredentials,
    certificates_to_pem,
    enroll_error_body,
    generate_private_key,
    server_context,
    spki_pin,
)
from mirbad_router import CLIENT_CLOSED_REQUEST, RequestTooLargeError, read_body

__all__ = [
    "MAX_ENROLL_BODY_BYTES",
    "create_enroll_app",
    "enroll_server_context",
    "issue_enroll_server_credentials",
]

_log = logging.getLogger(__name__)

MAX_ENROLL_BODY_BYTES: Final = 64 * 1024
"""The largest enrollment request read (a token and a CSR take about 1 KiB)."""

# The refusals a node can act on: fix its CSR, or ask the operator for a new token.
_REFUSALS: Final[tuple[tuple[type[Exception], EnrollErrorCode], ...]] = (
    (UnknownEnrollmentTokenError, EnrollErrorCode.TOKEN_UNKNOWN),
    (EnrollmentTokenUsedError, EnrollErrorCode.TOKEN_USED),
    (EnrollmentTokenExpiredError, EnrollErrorCode.TOKEN_EXPIRED),
    (CertificateRequestError, EnrollErrorCode.CSR_REJECTED),
    (NodeError, EnrollErrorCode.NODE_CONFLICT),
)


def create_enroll_app(tokens: EnrollmentTokens, ca_certificate: x509.Certificate) -> Starlette:
    """Build the enroll listener's app.

    Routes: ``GET /api/nodes/enroll/ca`` (the CA certificate PEM, public) and ``POST
    /api/nodes/enroll`` (``{token, csr}`` to ``{nodeName, certificate, caCertificate}``). Refusals use
    the enrollment error envelope: 400 for a bad body or CSR, 401 for an unknown or forged token, 409
    for a used one or a node that cannot be registered (``node_conflict``), 410 for an expired one, 413
    for an oversized body, 500 when the token store or the node registry fails. An accepted enrollment
    registers the node when its token named the agent's URL (see
    :class:`~mirbad_orchestration.fleet.EnrollmentTokens`).

    Args:
        tokens: the master's token store (it holds the CA that certifies nodes).
        ca_certificate: the fleet CA certificate served to joining nodes.
    """
    ca_pem = certificates_to_pem([ca_certificate])

    async def ca(request: Request) -> Response:
        return Response(ca_pem, media_type=ENROLL_CA_MEDIA_TYPE)

    async def enroll(request: Request) -> Response:
        return await _enroll(request, tokens)

    return Starlette(
        routes=[
            Route(ENROLL_CA_PATH, ca, methods=["GET"], name="enroll-ca"),
            Route(ENROLL_PATH, enroll, methods=["POST"], name="enroll"),
        ]
    )


async def _enroll(request: Request, tokens: EnrollmentTokens) -> Response:
    peer = request.client.host if request.client else "unknown peer"
    try:
        body = EnrollRequest.from_wire_json(await read_body(request, limit=MAX_ENROLL_BODY_BYTES))
    except ClientDisconnect:
        return Response(status_code=CLIENT_CLOSED_REQUEST)
    except RequestTooLargeError as exc:
        return _refusal(EnrollErrorCode.REQUEST_TOO_LARGE, str(exc))
    except InvalidFieldError as exc:
        return _refusal(EnrollErrorCode.INVALID_REQUEST, str(exc), field=exc.field)
    try:
        # PEM is ASCII; anything else becomes "?", which the CSR reader then refuses (400, not 500).
        enrollment = await tokens.redeem(body.token, body.csr.encode("ascii", "replace"))
    except (EnrollmentStoreError, NodeRegistryError) as exc:
        _log.error("enrollment from %s failed: %s", peer, exc)
        return _refusal(
            EnrollErrorCode.INTERNAL_ERROR,
            "the master cannot use its token store or node registry; see its log",
        )
    except (EnrollmentTokenError, CertificateRequestError, NodeError) as exc:
        _log.warning("enrollment from %s refused: %s", peer, exc)
        return _refusal(_code_of(exc), str(exc))
    _log.info(
        "enrolled node %s from %s (key pin-sha256 %s)%s",
        enrollment.node_name,
        peer,
        spki_pin(enrollment.certificate),
        f", registered as node {enrollment.node_id}" if enrollment.node_id else "",
    )
    answer = EnrollResponse(
        node_name=enrollment.node_name,
        certificate=certificates_to_pem([enrollment.certificate]).decode("ascii"),
        ca_certificate=certificates_to_pem([enrollment.ca_certificate]).decode("ascii"),
    )
    return JSONResponse(answer.to_wire())


def _code_of(exc: Exception) -> EnrollErrorCode:
    return next(code for kind, code in _REFUSALS if isinstance(exc, kind))


def _refusal(code: EnrollErrorCode, message: str, *, field: str | None = None) -> JSONResponse:
    return JSONResponse(enroll_error_body(code, message, field=field), status_code=code.http_status)


def issue_enroll_server_credentials(
    authority: CertificateAuthority,
    names: Iterable[str],
    *,
    common_name: str = "mirbad-master",
    validity: timedelta = DEFAULT_LEAF_VALIDITY,
) -> TlsCredentials:
    """Create a key and have the fleet CA certify it as the master's TLS server identity.

    The certificate carries :data:`~mirbad_protocol.pki.ENROLL_LISTENER_NAME`, which a joining node
    requires and no node certificate can carry.

    Args:
        authority: the fleet CA.
        names: the DNS names and IP addresses nodes use in ``--master`` (each becomes a subject
            alternative name too).
        common_name: the certificate's subject.
        validity: how long the certificate is valid.

    Raises:
        CertificateRequestError: a name is neither an IP address nor a plain host name.
    """
    key = generate_private_key()
    dns_names, addresses = _split_names(names)
    # The names pass the CSR policy's shape check (no wildcard, a plain host name) before the CA
    # certifies them outside that policy.
    SanPolicy().check([n for n in dns_names if n.lower() != ENROLL_LISTENER_NAME], addresses)
    certificate = authority.issue_enroll_listener_certificate(
        key.public_key(),
        dns_names=dns_names,
        ip_addresses=addresses,
        common_name=common_name,
        validity=validity,
    )
    return TlsCredentials(certificate, key, (authority.certificate,))


def enroll_server_context(credentials: TlsCredentials) -> ssl.SSLContext:
    """The enroll listener's TLS server context: the master's certificate, no client certificate asked.

    Give it to uvicorn with ``ssl_context_factory=lambda config, default: context``.
    """
    context = server_context(credentials.certificate, credentials.private_key, credentials.ca_certificates)
    # A joining node has no certificate yet; its one-time token authenticates it instead.
    context.verify_mode = ssl.CERT_NONE
    return context


def _split_names(names: Iterable[str]) -> tuple[list[str], list[IpAddress]]:
    dns_names: list[str] = []
    addresses: list[IpAddress] = []
    for name in names:
        try:
            addresses.append(ipaddress.ip_address(name))
        except ValueError:
            dns_names.append(name)
    return dns_names, addresses
