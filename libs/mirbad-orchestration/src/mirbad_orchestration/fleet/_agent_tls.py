"""Mutual TLS to an agent that must also be the node it claims to be.

The master's TLS context already refuses any certificate the fleet CA did not issue, and any whose
names do not include the host the master dialled. That still lets one enrolled node answer at another
node's address (an address that moved in DNS, a copied configuration), so each node's context checks,
as the handshake completes and before a single byte of a request is sent, that the certificate carries
the node's enrolled name and, when the node record pins one, the node's key.
"""

from __future__ import annotations

import hmac
import ssl
from collections.abc import Callable

import httpx
from cryptography import x509

from mirbad_protocol.agent import AGENT_CLIENT_KEEPALIVE_S
from mirbad_protocol.pki import TlsCredentials, certificate_identity, spki_pin

from ._nodes import NodeRecord

__all__ = ["PooledTransportBuilder"]


class WrongAgentCertificateError(ssl.SSLCertVerificationError):
    """The agent's certificate is valid for the fleet but is not the expected node's (a handshake failure).

    It travels through httpx as the cause of a ``ConnectError``; the agent client reports it as a
    :class:`~mirbad_orchestration.exceptions.NodeIdentityError`.
    """


_KEEPALIVE_CONNECTIONS = 128

PooledTransportBuilder = Callable[[ssl.SSLContext, httpx.Limits], httpx.AsyncBaseTransport]
"""Builds a transport that sends no request twice (no retries) from a TLS context and pool limits."""


def bind_node_identity(context: ssl.SSLContext, record: NodeRecord) -> ssl.SSLContext:
    """Make every handshake on ``context`` refuse an agent that is not ``record``'s node; returns it.

    ``context`` must be used for this node alone (build one per node).
    """
    expected_name = record.expected_certificate_name
    pin = record.pin_sha256
    where = record.agent_url

    class _NodeSSLObject(ssl.SSLObject):
        def do_handshake(self) -> None:
            super().do_handshake()
            der = self.getpeercert(binary_form=True)
            if not der:
                raise WrongAgentCertificateError(f"the agent at {where} presented no certificate")
            certificate = x509.load_der_x509_certificate(der)
            name = certificate_identity(certificate).common_name
            if name != expected_name:
                raise WrongAgentCertificateError(
                    f"the agent at {where} presented the certificate of {name!r}, not of {expected_name!r}"
                )
            if pin is not None and not hmac.compare_digest(spki_pin(certificate), pin):
                found = spki_pin(certificate)
                raise WrongAgentCertificateError(
                    f"the agent at {where} presented a key pinned {found}, not {pin}"
                )

    context.sslobject_class = _NodeSSLObject
    return context


def node_transport(
    credentials: TlsCredentials, record: NodeRecord, *, build: PooledTransportBuilder | None = None
) -> httpx.AsyncBaseTransport:
    """The transport to ``record``'s agent: the master's certificate, the fleet CA, the node's identity.

    Args:
        credentials: the master's certificate and the fleet CA.
        record: the node whose agent it reaches.
        build: makes the pooled transport from the TLS context and the pool's limits (the master
            passes mirbad_router's ``lean_transport``); None: httpx's own ``AsyncHTTPTransport``.
    """
    context = bind_node_identity(credentials.client_context(), record)
    # retries=0: a start must never be sent twice behind the caller's back.
    # Keep as many idle connections as the router may have requests in flight: with httpx's default
    # of 20, most requests at higher concurrency paid a fresh mutual-TLS handshake to the agent.
    # The expiry stays well inside the agent's idle timeout, so a pooled connection is never reused
    # just as the agent closes it.
    limits = httpx.Limits(
        max_connections=None,
        max_keepalive_connections=_KEEPALIVE_CONNECTIONS,
        keepalive_expiry=AGENT_CLIENT_KEEPALIVE_S,
    )
    if build is not None:
        return build(context, limits)
    return httpx.AsyncHTTPTransport(verify=context, retries=0, limits=limits)
