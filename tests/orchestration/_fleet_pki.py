"""A throw-away fleet PKI for tests: a CA, agent (server) credentials and the master's client credentials."""

from __future__ import annotations

from dataclasses import dataclass

from tests._support.agent_fleet import master_identity, node_identity

from mirbad_protocol.pki import CertificateAuthority, TlsCredentials


@dataclass(frozen=True)
class FleetPki:
    """One CA and helpers to issue the identities of its fleet."""

    ca: CertificateAuthority

    @classmethod
    def create(cls, name: str = "Test fleet CA") -> FleetPki:
        return cls(CertificateAuthority.create(name))

    def agent(self, node_name: str) -> TlsCredentials:
        """A node agent's server identity, valid for localhost and 127.0.0.1."""
        return node_identity(self.ca, node_name)

    def master(self) -> TlsCredentials:
        """The master's client identity."""
        return master_identity(self.ca)
