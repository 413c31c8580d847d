"""The enrollment contract between a joining node and the master: the join token, two routes, their bodies.

The operator asks the master for a join token and hands it to the new node. The token carries the
fleet CA's key pin next to the one-time secret, so the node can check that it talks to the right master
before it sends the secret (the way ``kubeadm join`` checks a CA hash): it fetches the CA certificate
from :data:`ENROLL_CA_PATH` over a TLS connection it does not trust yet, compares the pin, and only then
posts the token and its CSR to :data:`ENROLL_PATH` over a connection that trusts that CA alone.

A join token reads ``mbj1.<pin>.<secret>``: the format version, the ``pin-sha256`` of the CA key in
unpadded base64url (43 characters), and the secret (URL-safe base64 text). Dots separate the parts
because neither alphabet contains one, and the whole token survives a shell, an URL and a YAML file.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Final

from pydantic import Field

from ._wire import WireModel
from .exceptions import InvalidFieldError

__all__ = [
    "ENROLL_CA_MEDIA_TYPE",
    "ENROLL_CA_PATH",
    "ENROLL_PATH",
    "JOIN_TOKEN_PREFIX",
    "EnrollError",
    "EnrollErrorBody",
    "EnrollErrorCode",
    "EnrollRequest",
    "EnrollResponse",
    "JoinToken",
    "enroll_error_body",
]

JOIN_TOKEN_PREFIX: Final = "mbj1"  # noqa: S105 - a format tag, not a secret
"""The first part of a join token: "Mirbad join", format 1."""
ENROLL_CA_PATH: Final = "/api/nodes/enroll/ca"
"""GET, public: the fleet CA certificate as PEM (:data:`ENROLL_CA_MEDIA_TYPE`)."""
ENROLL_PATH: Final = "/api/nodes/enroll"
"""POST :class:`EnrollRequest`: a :class:`EnrollResponse`, or an :class:`EnrollErrorBody` refusal."""
ENROLL_CA_MEDIA_TYPE: Final = "application/x-pem-file"
"""The media type of the CA certificate answer."""

_PIN_BYTES: Final = 32  # a SHA-256 digest
_SECRET: Final = re.compile(r"[A-Za-z0-9_-]{32,128}")
_PIN_TEXT: Final = re.compile(r"[A-Za-z0-9_-]{43}")


@dataclass(frozen=True)
class JoinToken:
    """A join token: the CA key pin the node must see, and the one-time secret it then sends.

    Attributes:
        pin: the ``pin-sha256`` of the fleet CA key, in standard base64 as ``spki_pin`` writes it.
        secret: the one-time secret the master stores only as a hash.

    Raises:
        InvalidFieldError: (field ``token``) the pin is not a SHA-256 digest or the secret is malformed.
    """

    pin: str
    secret: str

    def __post_init__(self) -> None:
        try:
            digest = base64.b64decode(self.pin, validate=True)
        except binascii.Error:
            digest = b""
        if len(digest) != _PIN_BYTES:
            raise InvalidFieldError("token", "the CA pin must be the base64 of a SHA-256 digest")
        if not _SECRET.fullmatch(self.secret):
            raise InvalidFieldError("token", "the secret must be 32 to 128 URL-safe base64 characters")

    def __str__(self) -> str:
        return self.encode()

    def encode(self) -> str:
        """The token as the operator copies it: ``mbj1.<pin as unpadded base64url>.<secret>``."""
        pin = base64.urlsafe_b64encode(base64.b64decode(self.pin)).rstrip(b"=").decode("ascii")
        return f"{JOIN_TOKEN_PREFIX}.{pin}.{self.secret}"

    @classmethod
    def parse(cls, text: str) -> JoinToken:
        """Read a join token, ignoring surrounding white space (a pasted token often has some).

        Raises:
            InvalidFieldError: (field ``token``) the text is not a join token of this format.
        """
        parts = text.strip().split(".")
        if len(parts) != 3 or parts[0] != JOIN_TOKEN_PREFIX:
            raise InvalidFieldError(
                "token",
                f"a join token reads {JOIN_TOKEN_PREFIX}.<CA pin>.<secret>; copy it whole from the master",
            )
        if not _PIN_TEXT.fullmatch(parts[1]):
            raise InvalidFieldError("token", "the CA pin part must be 43 base64url characters")
        digest = base64.urlsafe_b64decode(parts[1] + "=")
        return cls(base64.b64encode(digest).decode("ascii"), parts[2])

    @staticmethod
    def is_join_token(text: str) -> bool:
        """Whether ``text`` claims the join-token format (a bare secret never contains a dot)."""
        return text.strip().startswith(JOIN_TOKEN_PREFIX + ".")


class EnrollRequest(WireModel):
    """The body a joining node posts.

    Attributes:
        token: the join token (or the bare secret of an older token).
        csr: the node's certificate signing request, PEM.
    """

    token: Annotated[str, Field(min_length=1, max_length=512)]
    csr: Annotated[str, Field(min_length=1, max_length=16384)]


class EnrollResponse(WireModel):
    """The master's answer to an accepted enrollment.

    Attributes:
        node_name: the node name the token was issued for (the certificate's common name).
        certificate: the node's certificate, PEM.
        ca_certificate: the fleet CA certificate, PEM; the node trusts it, and only it, from now on.
    """

    node_name: str
    certificate: str
    ca_certificate: str


class EnrollErrorCode(StrEnum):
    """Why the master refused an enrollment; each code has one HTTP status (:attr:`http_status`)."""

    INVALID_REQUEST = "invalid_request"
    """400: the body is not JSON or breaks :class:`EnrollRequest` (``field`` names it)."""
    CSR_REJECTED = "csr_rejected"
    """400: the CSR is unreadable, badly signed, or asks for names the master will not certify."""
    TOKEN_UNKNOWN = "token_unknown"  # noqa: S105 - an error code
    """401: the master never issued this token (mistyped, forged, another master's, long expired)."""
    TOKEN_USED = "token_used"  # noqa: S105 - an error code
    """409: the token already enrolled a node."""
    TOKEN_EXPIRED = "token_expired"  # noqa: S105 - an error code
    """410: the token's lifetime is over."""
    NODE_CONFLICT = "node_conflict"
    """409: the node cannot be registered: another node took its name or agent URL since the token was
    issued, or the node being re-enrolled was removed. The token stays unspent."""
    REQUEST_TOO_LARGE = "request_too_large"
    """413: the body is far larger than any enrollment request."""
    INTERNAL_ERROR = "internal_error"
    """500: the master could not read or write its token store."""

    @property
    def http_status(self) -> int:
        """The HTTP status the master answers this code with."""
        return _HTTP_STATUS[self]


_HTTP_STATUS: Final = {
    EnrollErrorCode.INVALID_REQUEST: 400,
    EnrollErrorCode.CSR_REJECTED: 400,
    EnrollErrorCode.TOKEN_UNKNOWN: 401,
    EnrollErrorCode.TOKEN_USED: 409,
    EnrollErrorCode.TOKEN_EXPIRED: 410,
    EnrollErrorCode.NODE_CONFLICT: 409,
    EnrollErrorCode.REQUEST_TOO_LARGE: 413,
    EnrollErrorCode.INTERNAL_ERROR: 500,
}


class EnrollError(WireModel):
    """The inner object of a refusal: ``code`` (an :class:`EnrollErrorCode` value), ``message``, ``field``."""

    code: str
    message: str
    field: str | None = None


class EnrollErrorBody(WireModel):
    """Every enrollment refusal: ``{"error": {"code", "message"[, "field"]}}``."""

    error: EnrollError


def enroll_error_body(code: EnrollErrorCode, message: str, *, field: str | None = None) -> dict[str, Any]:
    """The JSON body of an enrollment refusal (send it with ``code.http_status``)."""
    return EnrollErrorBody(error=EnrollError(code=code.value, message=message, field=field)).to_wire()
