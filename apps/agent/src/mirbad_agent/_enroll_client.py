"""Joining a fleet: verify the master against the join token's pin, then trade the token for a certificate.

The node first fetches the master's CA certificate over a TLS connection it cannot verify yet and
compares the CA key's pin with the pin inside the join token; only when they match does it open a
second connection that trusts that CA alone and requires the listener's certificate to carry
:data:`~mirbad_protocol.pki.ENROLL_LISTENER_NAME` (a name the CA never gives a node, so an enrolled node
serving the enroll API at the master's address is refused), and send the token with its CSR. A wrong
URL, an intercepted connection or an impostor node therefore never sees the token's secret. The
private key is created here and never leaves the node.
"""

from __future__ import annotations

import hmac
import os
import ssl
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any, Final

import anyio
import anyio.to_thread
import httpx
from cryptography import x509
from cryptography.exceptions import InvalidSignature

from mirbad_protocol import InvalidFieldError, PkiError
from mirbad_protocol.pki import (
    ENROLL_CA_PATH,
    ENROLL_LISTENER_NAME,
    ENROLL_PATH,
    EnrollErrorBody,
    EnrollRequest,
    EnrollResponse,
    IpAddress,
    JoinToken,
    PrivateKey,
    TlsCredentials,
    certificate_request_to_pem,
    certificates_from_pem,
    certificates_to_pem,
    create_certificate_request,
    generate_private_key,
    spki_pin,
)

from ._fence import FENCE_FILE_NAME
from .exceptions import MirbadAgentError

__all__ = ["AGENT_TLS_STEM", "EXIT_FAILED", "EXIT_REFUSED", "EnrollFailedError", "enroll_node"]

AGENT_TLS_STEM: Final = "agent"
"""The file stem of the agent's TLS identity in its state folder (``agent.key``, ``.crt``, ``-ca.crt``)."""
EXIT_REFUSED: Final = 2
"""Exit status when the input cannot work: a malformed, unknown, used or expired token, or a bad URL."""
EXIT_FAILED: Final = 1
"""Exit status for every other failure: master unreachable, pin or TLS mismatch, refused CSR, files."""

_HTTP_TIMEOUT_S: Final = 30.0
_TOKEN_REFUSALS: Final = frozenset({401, 409, 410})


class EnrollFailedError(MirbadAgentError):
    """Enrollment did not happen; the message is one line for the operator.

    Attributes:
        exit_code: :data:`EXIT_REFUSED` or :data:`EXIT_FAILED`.
    """

    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


async def enroll_node(
    master_url: str,
    token: str,
    state_dir: Path,
    *,
    node_name: str,
    dns_names: Sequence[str] = (),
    ip_addresses: Sequence[IpAddress] = (),
) -> TlsCredentials:
    """Verify the master against the join token's pin, enroll, and save the identity in ``state_dir``.

    Args:
        master_url: the enroll listener, ``https://HOST[:PORT]``; HOST must be one of the names in the
            master's certificate.
        token: the join token the master printed.
        state_dir: the agent's state folder (created 0700 if missing).
        node_name: the node name asked for (the master certifies the token's node name).
        dns_names: DNS names the master will reach this agent at.
        ip_addresses: IP addresses the master will reach this agent at.

    Raises:
        EnrollFailedError: nothing was saved; the message says why, ``exit_code`` how to exit.
    """
    join_token = _parse_token(token)
    base = _master_base(master_url)
    _prepare_state_dir(state_dir)
    ca = await _fetch_pinned_ca(base, join_token.pin)
    key = generate_private_key()
    request = create_certificate_request(key, node_name, dns_names=dns_names, ip_addresses=ip_addresses)
    answer = await _post_enrollment(base, ca, join_token, certificate_request_to_pem(request).decode("ascii"))
    credentials = _checked_credentials(answer, key, join_token.pin)
    fleet_ca = state_dir / f"{AGENT_TLS_STEM}-ca.crt"
    before = await anyio.to_thread.run_sync(_read_or_none, fleet_ca)
    try:
        await anyio.to_thread.run_sync(credentials.save, state_dir, AGENT_TLS_STEM)
        if await anyio.to_thread.run_sync(_read_or_none, fleet_ca) != before:
            # Another fleet (a new CA): the fence of the master before is no fence for its master.
            await anyio.to_thread.run_sync(partial((state_dir / FENCE_FILE_NAME).unlink, missing_ok=True))
    except OSError as exc:
        raise EnrollFailedError(
            f"enrolled as {answer.node_name}, but cannot save the identity in {state_dir}: "
            f"{exc.strerror or exc}; fix the folder and enroll again with a new token"
        ) from None
    return credentials


def _read_or_none(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _parse_token(text: str) -> JoinToken:
    try:
        return JoinToken.parse(text)
    except InvalidFieldError as exc:
        raise EnrollFailedError(f"unusable --token: {exc.reason}", EXIT_REFUSED) from None


def _master_base(master_url: str) -> str:
    try:
        url = httpx.URL(master_url)
    except httpx.InvalidURL as exc:
        raise EnrollFailedError(f"unusable --master {master_url!r}: {exc}", EXIT_REFUSED) from None
    if url.scheme != "https" or not url.host or url.query:
        raise EnrollFailedError(f"--master must be https://HOST[:PORT], not {master_url!r}", EXIT_REFUSED)
    return str(url.copy_with(fragment=None)).rstrip("/")


def _prepare_state_dir(state_dir: Path) -> None:
    # Checked before the token is spent: a token is single-use, a folder problem should not waste it.
    try:
        state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise EnrollFailedError(
            f"cannot create the state folder {state_dir}: {exc.strerror or exc}"
        ) from None
    if not os.access(state_dir, os.W_OK | os.X_OK):
        raise EnrollFailedError(f"cannot write into the state folder {state_dir}")


async def _fetch_pinned_ca(base: str, pin: str) -> x509.Certificate:
    # Unverified on purpose: this connection only fetches a public certificate, which the pin then
    # authenticates. Nothing secret travels on it.
    async with httpx.AsyncClient(
        verify=_unverified_context(), trust_env=False, timeout=_HTTP_TIMEOUT_S
    ) as client:
        response = await _request(client, "GET", base + ENROLL_CA_PATH)
    if response.status_code != 200:
        raise EnrollFailedError(
            f"the master at {base} answered {response.status_code} for its CA certificate"
        )
    try:
        ca = certificates_from_pem(response.content)[0]
    except PkiError as exc:
        raise EnrollFailedError(f"the master at {base} sent no usable CA certificate: {exc}") from None
    if not hmac.compare_digest(spki_pin(ca), pin):
        raise EnrollFailedError(
            f"the master at {base} has CA pin {spki_pin(ca)}, but the token expects {pin}: wrong --master, "
            "or the connection is intercepted; the token was not sent"
        )
    return ca


async def _post_enrollment(base: str, ca: x509.Certificate, token: JoinToken, csr_pem: str) -> EnrollResponse:
    body = EnrollRequest(token=token.encode(), csr=csr_pem).to_wire()
    async with httpx.AsyncClient(
        verify=_trusting_context(ca), trust_env=False, timeout=_HTTP_TIMEOUT_S
    ) as client:
        # The host name checked is the listener's reserved name, sent as SNI in place of the URL's host:
        # the master's identity is that name under the pinned CA, wherever it is reached.
        response = await _request(
            client, "POST", base + ENROLL_PATH, json=body, extensions={"sni_hostname": ENROLL_LISTENER_NAME}
        )
    if response.status_code == 200:
        try:
            return EnrollResponse.from_wire_json(response.content)
        except InvalidFieldError as exc:
            raise EnrollFailedError(f"the master at {base} answered with an unreadable body: {exc}") from None
    message = _refusal_message(response)
    exit_code = EXIT_REFUSED if response.status_code in _TOKEN_REFUSALS else EXIT_FAILED
    raise EnrollFailedError(
        f"the master refused the enrollment ({response.status_code}): {message}", exit_code
    )


async def _request(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    json: dict[str, Any] | None = None,
    extensions: dict[str, Any] | None = None,
) -> httpx.Response:
    try:
        return await client.request(method, url, json=json, extensions=extensions)
    except httpx.ConnectError as exc:
        reason = str(exc) or type(exc).__name__
        if "CERTIFICATE_VERIFY_FAILED" in reason or "certificate verify failed" in reason:
            raise EnrollFailedError(
                f"the server at {url} is not the master's enroll listener (its certificate from the "
                f"pinned CA does not carry {ENROLL_LISTENER_NAME}; an older master needs an upgrade); "
                f"the token was not sent: {reason}"
            ) from None
        raise EnrollFailedError(f"cannot reach the master at {url}: {reason}") from None
    except httpx.HTTPError as exc:
        raise EnrollFailedError(
            f"talking to the master at {url} failed: {str(exc) or type(exc).__name__}"
        ) from None


def _refusal_message(response: httpx.Response) -> str:
    try:
        return EnrollErrorBody.from_wire_json(response.content).error.message
    except InvalidFieldError:
        return response.text.strip()[:500] or response.reason_phrase


def _checked_credentials(answer: EnrollResponse, key: PrivateKey, pin: str) -> TlsCredentials:
    try:
        ca = certificates_from_pem(answer.ca_certificate.encode("ascii", "replace"))[0]
        certificate = certificates_from_pem(answer.certificate.encode("ascii", "replace"))[0]
    except PkiError as exc:
        raise EnrollFailedError(f"the master's answer holds an unusable certificate: {exc}") from None
    if not hmac.compare_digest(spki_pin(ca), pin):
        raise EnrollFailedError("the master answered with another CA than the pinned one; nothing was saved")
    if spki_pin(certificate) != spki_pin(key):
        raise EnrollFailedError("the master certified another key than this node's; nothing was saved")
    try:
        certificate.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature) as exc:
        raise EnrollFailedError(f"the issued certificate does not chain to the pinned CA: {exc}") from None
    return TlsCredentials(certificate, key, (ca,))


def _unverified_context() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _trusting_context(ca: x509.Certificate) -> ssl.SSLContext:
    # Only the pinned CA, never the system store; PROTOCOL_TLS_CLIENT checks the host name by default.
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.verify_flags |= ssl.VERIFY_X509_STRICT
    context.load_verify_locations(cadata=certificates_to_pem([ca]).decode("ascii"))
    return context
