"""A fleet's certificates for agent tests: a CA, the master's client identity and an agent's identity.

The agent's identity is issued from a CSR (serverAuth, named 127.0.0.1 and localhost) exactly as
enrollment issues it, and saved where ``mirbad-agent serve`` reads it. Strangers are issued too: a
client of another CA and a node certificate of the same CA, which the agent must both refuse.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

from mirbad_agent import AGENT_TLS_STEM
from mirbad_protocol.pki import (
    CertificateAuthority,
    SanPolicy,
    TlsCredentials,
    create_certificate_request,
    generate_private_key,
)

LOOPBACK = ipaddress.ip_address("127.0.0.1")


@dataclass(frozen=True)
class Fleet:
    """The identities of one test fleet."""

    ca: CertificateAuthority
    master: TlsCredentials
    agent: TlsCredentials

    def save_agent(self, state_dir: Path) -> None:
        """Write the agent's key, certificate and CA where ``mirbad-agent serve`` looks for them."""
        state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.agent.save(state_dir, AGENT_TLS_STEM)

    def node_client(self, name: str = "other-node") -> TlsCredentials:
        """Another enrolled node's identity (serverAuth only), presented as a client."""
        return node_identity(self.ca, name)


def create_fleet() -> Fleet:
    """A new CA with a master client identity and an agent identity for loopback."""
    ca = CertificateAuthority.create("Mirbad test CA")
    return Fleet(ca=ca, master=master_identity(ca), agent=node_identity(ca, "node-1"))


def master_identity(ca: CertificateAuthority, name: str = "mirbad-master") -> TlsCredentials:
    """A client-only identity issued by ``ca``, as the master holds one."""
    key = generate_private_key()
    certificate = ca.issue_client_certificate(key.public_key(), name)
    return TlsCredentials(certificate, key, (ca.certificate,))


def node_identity(ca: CertificateAuthority, name: str) -> TlsCredentials:
    """A node's server identity issued from a CSR, as enrollment issues it (localhost and 127.0.0.1)."""
    key = generate_private_key()
    request = create_certificate_request(key, name, dns_names=["localhost"], ip_addresses=[LOOPBACK])
    certificate = ca.issue_from_csr(request, policy=SanPolicy())
    return TlsCredentials(certificate, key, (ca.certificate,))
