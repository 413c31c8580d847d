"""One-time enrollment tokens: how a new node obtains its certificate from the master.

The operator asks the master for a token for a node name and hands it to the node (``mirbad-agent
enroll --master URL --token T``). The node sends the token with a CSR; the master certifies the CSR's
key under the token's node name and marks the token used. Tokens expire, enroll exactly once, and are
stored only as SHA-256 hashes: the token file alone does not let anyone enroll. A hash without a salt or
a slow KDF is enough here because a token carries 256 random bits, not a guessable password.

What the operator copies is a join token (:meth:`EnrollmentTokens.issue_join_token`): the secret with
the CA key pin in front, so the node can verify the master before it sends the secret.

With the node registry at hand, a name is enrolled once: a token for a name a node already has is
refused unless it is asked for as a re-enrollment, and redeeming a token registers the node (when the
token says where its agent answers) pinned to the key just certified. Re-enrolling pins the new key,
so the master stops accepting the node's old certificate at once, although the CA still vouches for it.
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

from mirbad_orchestration.exceptions import (
    DuplicateNodeError,
    EnrollmentStoreError,
    EnrollmentTokenExpiredError,
    EnrollmentTokenUsedError,
    UnknownEnrollmentTokenError,
    UnknownNodeError,
)
from mirbad_protocol import InvalidFieldError, WireModel, field_error_from_validation
from mirbad_protocol.pki import (
    DEFAULT_LEAF_VALIDITY,
    CertificateAuthority,
    JoinToken,
    SanPolicy,
    certificate_request_from_pem,
    spki_pin,
)
from mirbad_protocol.support import write_json_atomic

from ._nodes import NodeRecord, NodeRegistry, check_agent_url

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
        node_id: the node registered (or re-enrolled) with this certificate; None when nothing was
            registered (the token named no agent URL, or the store has no node registry).
    """

    node_name: str
    certificate: x509.Certificate
    ca_certificate: x509.Certificate
    node_id: str | None = None


class _TokenRecord(WireModel):
    token_sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    node_name: str
    issued_at: datetime
    expires_at: datetime
    used_at: datetime | None = None
    agent_url: str | None = None
    reenroll_node_id: str | None = None


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
        nodes: the node registry: names are checked against it at issue and redeem, and enrolled
            nodes are registered in it. None: tokens are checked against nothing and register nothing.
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
        nodes: NodeRegistry | None = None,
    ) -> None:
        self._path = path
        self._nodes = nodes
        self._authority = authority
        self._san_policy = san_policy or SanPolicy()
        self._certificate_validity = certificate_validity
        self._clock = clock or _utc_now
        self._retention = retention
        self._lock = anyio.Lock()

    async def issue(
        self,
        node_name: str,
        ttl: timedelta = DEFAULT_TOKEN_TTL,
        *,
        agent_url: str | None = None,
        reenroll: bool = False,
    ) -> str:
        """Create a token that enrolls ``node_name`` once within ``ttl``; show it to the operator once.

        Args:
            node_name: the name the certificate will carry.
            ttl: how long the token may be used.
            agent_url: where the node's agent will answer (``https://host:9443``): redeeming the token
                then registers the node there. None: the operator registers it (``POST /api/nodes``).
            reenroll: the name is an existing node's, which gets a new certificate: redeeming the token
                pins the node to the new key, so its old certificate is refused from then on.

        Raises:
            InvalidFieldError: the node name, lifetime or agent URL is unusable (field ``nodeName``,
                ``ttl`` or ``agentUrl``).
            DuplicateNodeError: a node has that name and ``reenroll`` is not set.
            UnknownNodeError: ``reenroll`` is set but no node has that name.
            NodeRegistryError: the node registry cannot be read.
            EnrollmentStoreError: the token file cannot be read or written.
        """
        if not re.fullmatch(NODE_NAME_PATTERN, node_name):
            raise InvalidFieldError("nodeName", f"{node_name!r} must match {NODE_NAME_PATTERN}")
        if ttl <= timedelta(0):
            raise InvalidFieldError("ttl", "a token must live for a positive time")
        if agent_url is not None:
            agent_url = _checked_agent_url(agent_url)
        reenroll_node_id = await self._node_to_reenroll(node_name) if reenroll else None
        if not reenroll:
            await self._check_name_free(node_name)
        token = secrets.token_urlsafe(_TOKEN_BYTES)
        async with self._lock:
            now = self._clock()
            kept = [record for record in (await self._load()).tokens if not self._prunable(record, now)]
            kept.append(
                _TokenRecord(
                    token_sha256=_digest(token),
                    node_name=node_name,
                    issued_at=now,
                    expires_at=now + ttl,
                    agent_url=agent_url,
                    reenroll_node_id=reenroll_node_id,
                )
            )
            await self._save(_TokenFile(tokens=tuple(kept)))
        return token

    async def issue_join_token(
        self,
        node_name: str,
        ttl: timedelta = DEFAULT_TOKEN_TTL,
        *,
        agent_url: str | None = None,
        reenroll: bool = False,
    ) -> str:
        """Issue a token as :meth:`issue` does and return it as a join token carrying the CA key pin.

        The node checks the pin against the master's CA before it sends the secret, so a token typed
        against the wrong URL (or intercepted on the way) is never spent there.

        Raises:
            InvalidFieldError: the node name, lifetime or agent URL is unusable.
            DuplicateNodeError: a node has that name and ``reenroll`` is not set.
            UnknownNodeError: ``reenroll`` is set but no node has that name.
            NodeRegistryError: the node registry cannot be read.
            EnrollmentStoreError: the token file cannot be read or written.
        """
        secret = await self.issue(node_name, ttl, agent_url=agent_url, reenroll=reenroll)
        return JoinToken(self._authority.pin, secret).encode()

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
            DuplicateNodeError: a node took the name (or the agent URL) since the token was issued.
            UnknownNodeError: the node to re-enroll was removed since the token was issued.
            NodeRegistryError: the node registry cannot be read or written.
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
            node_id = await self._register(record, certificate, now)
            spent = record.model_copy(update={"used_at": now})
            await self._save(_TokenFile(tokens=tuple(spent if r is record else r for r in document.tokens)))
        return Enrollment(record.node_name, certificate, self._authority.certificate, node_id)

    async def _check_name_free(self, node_name: str) -> None:
        if self._nodes is None:
            return
        holder = _holder(await self._nodes.list(), node_name)
        if holder is not None:
            raise DuplicateNodeError(
                holder.id,
                f"node {holder.id!r} already has the name {node_name!r}; re-enroll it explicitly "
                "(reenroll) to give it a new certificate, or choose another name",
            )

    async def _node_to_reenroll(self, node_name: str) -> str | None:
        if self._nodes is None:
            return None
        holder = _holder(await self._nodes.list(), node_name)
        if holder is None:
            raise UnknownNodeError(node_name.lower())
        return holder.id

    async def _register(
        self, record: _TokenRecord, certificate: x509.Certificate, now: datetime
    ) -> str | None:
        if self._nodes is None:
            return None
        pin = spki_pin(certificate)
        if record.reenroll_node_id is not None:
            current = await self._nodes.get(record.reenroll_node_id)
            update = {"pin_sha256": pin, "certificate_name": record.node_name}
            if record.agent_url is not None:
                update["agent_url"] = record.agent_url
            await self._nodes.update(current.model_copy(update=update))
            return current.id
        await self._check_name_free(record.node_name)
        if record.agent_url is None:
            return None
        node = NodeRecord(
            id=record.node_name.lower(),
            name=record.node_name,
            agent_url=record.agent_url,
            certificate_name=record.node_name,
            pin_sha256=pin,
            enrolled_at=now,
        )
        await self._nodes.add(node)
        return node.id

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


def _holder(nodes: list[NodeRecord], node_name: str) -> NodeRecord | None:
    # Case-insensitive: ids are lowercase, and "Local" must not slip past "local".
    wanted = node_name.casefold()
    for node in nodes:
        names = (node.id, node.name, node.expected_certificate_name)
        if any(name.casefold() == wanted for name in names):
            return node
    return None


def _checked_agent_url(agent_url: str) -> str:
    try:
        return check_agent_url(agent_url)
    except ValueError as exc:
        raise InvalidFieldError("agentUrl", str(exc)) from None


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
