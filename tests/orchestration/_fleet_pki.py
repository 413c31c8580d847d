"""A throw-away fleet PKI for tests: a CA, agent (server) credentials and the master's client credentials."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from mirbad_protocol import (
    CertificateAuthority,
    SanPolicy,
    TlsCredentials,
    create_certificate_request,
    generate_private_key,
)

LOOPBACK = ipaddress.ip_address("127.0.0.1")


@dataclass(frozen=True)
class FleetPki:
    """One CA and helpers to issue the identities of its fleet."""

    ca: CertificateAuthority

    @classmethod
    def create(cls, name: str = "Test fleet CA") -> FleetPki:
        return cls(CertificateAuthority.create(name))

    def agent(self, node_name: str) -> TlsCredentials:
        """A node agent's server identity, valid for localhost and 127.0.0.1."""
        key = generate_private_key()
        request = create_certificate_request(key, node_name, dns_names=["localhost"], ip_addresses=[LOOPBACK])
        certificate = self.ca.issue_from_csr(request, policy=SanPolicy())
        return TlsCredentials(certificate, key, (self.ca.certificate,))

    def master(self) -> TlsCredentials:
        """The master's client identity."""
        key = generate_private_key()
        certificate = self.ca.issue_client_certificate(key.public_key(), "mirbad-master")
        return TlsCredentials(certificate, key, (self.ca.certificate,))
