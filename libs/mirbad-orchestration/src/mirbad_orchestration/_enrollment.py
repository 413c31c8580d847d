"""One-time enrollment tokens: how a new node obtains its certificate from the master.

The operator asks the master for a token for a node name and hands it to the node (``mirbad-agent
enroll --master URL --token T``). The node sends the token with a CSR; the master certifies the CSR's
key under the token's node name and marks the token used. Tokens expire, enroll exactly once, and are
stored only as SHA-256 hashes: the token file alone does not let anyone enroll. A hash without a salt or
a slow KDF is enough here because a token carries 256 random bits, not a guessable password.

What the operator copies is a join token (:meth:`EnrollmentTokens.issue_join_token`): the secret with
the CA key pin in front, so the node can verify the master before it sends the secret.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Final, Literal

import anyio
import anyio.to_thread
from cryptography import x509
from pydantic import Field, ValidationError

from mirbad_protocol import (
    DEFAULT_LEAF_VALIDITY,
    CertificateAuthority,
    InvalidFieldError,
    JoinToken,
    SanPolicy,
    WireModel,
    certificate_request_from_pem,
    field_error_from_validation,
    write_json_atomic,
)

from .exceptions import (
    EnrollmentStoreError,
    EnrollmentTokenExpiredError,
    EnrollmentTokenUsedError,
    UnknownEnrollmentTokenError,
)

__all__ = [
    "DEFAULT_TOKEN_TTL",
    "ENROLLMENT_TOKENS_FILE",
    "NODE_NAME_PATTERN",
    "Enrollment",
    "EnrollmentTokens",
]

ENROLLMENT_TOKENS_FILE: Final = "enrollment-tokens.json"
"""The token store's file name in the master's data directory."""
DEFAULT_TOKEN_TTL: Final = timedelta(hours=1)
"""How long a token stays valid unless the operator asks otherwise."""
NODE_NAME_PATTERN: Final = r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,62})$"
"""A node name: it becomes the certificate's common name, so it stays short and printable."""

_TOKEN_BYTES: Final = 32
# Spent and expired records are kept this long so that a late retry hears "used" or "expired"
# rather than "unknown", then pruned so the file does not grow forever.
_DEFAULT_RETENTION: Final = timedelta(days=7)

# Returns the current time as an aware UTC datetime; tests inject a fake one.
_Clock = Callable[[], datetime]


@dataclass(frozen=True)
class Enrollment:
    """What a redeemed token yields: the node's certificate and the CA it must trust for the master.

    Attributes:
        node_name: the node name the token was issued for (the certificate's common name).
        certificate: the node's new certificate.
        ca_certificate: the fleet CA, which the node pins from now on.
    """

    node_name: str
    certificate: x509.Certificate
    ca_certificate: x509.Certificate


class _TokenRecord(WireModel):
    token_sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    node_name: str
    issued_at: datetime
    expires_at: datetime
    used_at: datetime | None = None


class _TokenFile(WireModel):
    version: Literal[1] = 1
    tokens: tuple[_TokenRecord, ...] = ()


class EnrollmentTokens:
    """The master's store of enrollment tokens, persisted atomically in one owner-only JSON file.

    Args:
        path: the JSON file (usually ``{data dir}/enrollment-tokens.json``); its folder must exist.
        authority: the CA that certifies enrolled nodes.
        san_policy: which DNS names and addresses a node's CSR may have certified.
        certificate_validity: how long an enrolled node's certificate is valid.
        clock: the source of the current time.
        retention: how long used and expired records are kept before they are pruned.
    """

    def __init__(
        self,
        path: Path,
        authority: CertificateAuthority,
        *,
        san_policy: SanPolicy | None = None,
        certificate_validity: timedelta = DEFAULT_LEAF_VALIDITY,
        clock: _Clock | None = None,
        retention: timedelta = _DEFAULT_RETENTION,
    ) -> None:
        self._path = path
        self._authority = authority
        self._san_policy = san_policy or SanPolicy()
        self._certificate_validity = certificate_validity
        self._clock = clock or _utc_now
        self._retention = retention
        self._lock = anyio.Lock()

    async def issue(self, node_name: str, ttl: timedelta = DEFAULT_TOKEN_TTL) -> str:
        """Create a token that enrolls ``node_name`` once within ``ttl``; show it to the operator once.

        Raises:
            InvalidFieldError: the node name or the lifetime is unusable (field ``nodeName`` or ``ttl``).
            EnrollmentStoreError: the token file cannot be read or written.
        """
        if not re.fullmatch(NODE_NAME_PATTERN, node_name):
            raise InvalidFieldError("nodeName", f"{node_name!r} must match {NODE_NAME_PATTERN}")
        if ttl <= timedelta(0):
            raise InvalidFieldError("ttl", "a token must live for a positive time")
        token = secrets.token_urlsafe(_TOKEN_BYTES)
        async with self._lock:
            now = self._clock()
            kept = [record for record in (await self._load()).tokens if not self._prunable(record, now)]
            kept.append(
                _TokenRecord(
                    token_sha256=_digest(token), node_name=node_name, issued_at=now, expires_at=now + ttl
                )
            )
            await self._save(_TokenFile(tokens=tuple(kept)))
        return token

    async def issue_join_token(self, node_name: str, ttl: timedelta = DEFAULT_TOKEN_TTL) -> str:
        """Issue a token as :meth:`issue` does and return it as a join token carrying the CA key pin.

        The node checks the pin against the master's CA before it sends the secret, so a token typed
        against the wrong URL (or intercepted on the way) is never spent there.

        Raises:
            InvalidFieldError: the node name or the lifetime is unusable (field ``nodeName`` or ``ttl``).
            EnrollmentStoreError: the token file cannot be read or written.
        """
        return JoinToken(self._authority.pin, await self.issue(node_name, ttl)).encode()

    async def redeem(self, token: str, csr_pem: bytes) -> Enrollment:
        """Spend ``token`` and certify the key of ``csr_pem`` under the token's node name.

        ``token`` is a join token (``mbj1.<pin>.<secret>``) or its bare secret; a join token whose pin is
        not this master's CA is unknown here. A CSR that is refused leaves the token unspent, so the
        node can retry with a corrected one.

        Raises:
            UnknownEnrollmentTokenError: the token was never issued here (or was pruned).
            EnrollmentTokenUsedError: the token already enrolled a node.
            EnrollmentTokenExpiredError: the token's lifetime is over.
            CertificateRequestError: the CSR is unreadable, badly signed, or asks for refused names.
            EnrollmentStoreError: the token file cannot be read or written.
        """
        request = certificate_request_from_pem(csr_pem)
        secret = self._secret_of(token)
        async with self._lock:
            document = await self._load()
            now = self._clock()
            record = _find(document.tokens, _digest(secret))
            if record is None:
                raise UnknownEnrollmentTokenError()
            if record.used_at is not None:
                raise EnrollmentTokenUsedError(record.node_name, record.used_at)
            if now >= record.expires_at:
                raise EnrollmentTokenExpiredError(record.node_name, record.expires_at)
            certificate = self._authority.issue_from_csr(
                request,
                policy=self._san_policy,
                common_name=record.node_name,
                validity=self._certificate_validity,
                now=now,
            )
            spent = record.model_copy(update={"used_at": now})
            await self._save(_TokenFile(tokens=tuple(spent if r is record else r for r in document.tokens)))
        return Enrollment(record.node_name, certificate, self._authority.certificate)

    def _secret_of(self, token: str) -> str:
        if not JoinToken.is_join_token(token):
            return token
        try:
            join_token = JoinToken.parse(token)
        except InvalidFieldError:
            raise UnknownEnrollmentTokenError() from None
        # Not secret-dependent, so a plain comparison leaks nothing: the pin is public.
        if join_token.pin != self._authority.pin:
            raise UnknownEnrollmentTokenError()
        return join_token.secret

    def _prunable(self, record: _TokenRecord, now: datetime) -> bool:
        return (record.used_at or record.expires_at) + self._retention < now

    async def _load(self) -> _TokenFile:
        try:
            text = await anyio.Path(self._path).read_text(encoding="utf-8")
        except FileNotFoundError:
            return _TokenFile()
        except OSError as exc:
            raise EnrollmentStoreError(self._path, f"cannot read: {exc.strerror or exc}") from None
        try:
            return _TokenFile.model_validate_json(text)
        except ValidationError as exc:
            raise EnrollmentStoreError(
                self._path, f"not a token file: {field_error_from_validation(exc)}"
            ) from None

    async def _save(self, document: _TokenFile) -> None:
        # Written in full, unlike to_wire(): the version and every null are part of the file's shape.
        value = document.model_dump(mode="json", by_alias=True)
        try:
            await anyio.to_thread.run_sync(lambda: write_json_atomic(self._path, value))
        except OSError as exc:
            raise EnrollmentStoreError(self._path, f"cannot write: {exc.strerror or exc}") from None


def _digest(token: str) -> str:
    # surrogatepass: a JSON body may smuggle a lone surrogate in; it must hash (to nothing known), not crash.
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def _find(records: tuple[_TokenRecord, ...], digest: str) -> _TokenRecord | None:
    # Compare with every record in constant time, so the answer's timing does not hint at a prefix.
    found: _TokenRecord | None = None
    for record in records:
        if hmac.compare_digest(record.token_sha256, digest):
            found = record
    return found


def _utc_now() -> datetime:
    return datetime.now(UTC)
