"""Certificate signing requests: what a node asks to be certified as, and what the CA lets it have.

A node creates its key and a CSR naming itself (common name = node name) and the DNS names and IP
addresses the master reaches it at; the names end up in the certificate's subject alternative names,
which is what TLS hostname checking compares. The CA copies a name only when a :class:`SanPolicy` allows
it, so a node cannot obtain a certificate for another machine's name or address.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.x509.oid import NameOID

from ._pki import IpAddress, PrivateKey
from .exceptions import CertificateRequestError

__all__ = [
    "ENROLL_LISTENER_NAME",
    "RESERVED_DNS_SUFFIX",
    "IpNetwork",
    "SanPolicy",
    "certificate_request_from_pem",
    "certificate_request_to_pem",
    "check_request_key",
    "create_certificate_request",
    "requested_names",
]

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
"""A range of addresses a :class:`SanPolicy` certifies."""

RESERVED_DNS_SUFFIX: Final = "mirbad.invalid"
"""Names at or under it belong to the master's own identities; no CSR may ask for one. ``.invalid``
never resolves (RFC 6761), so no real host is ever reached, or named, by one."""
ENROLL_LISTENER_NAME: Final = f"enroll.{RESERVED_DNS_SUFFIX}"
"""The name only the enroll listener's certificate carries. A joining node checks the listener's
certificate against it (not against the ``--master`` URL's host), so a node certificate from the same
CA, whatever addresses it names, cannot pass for the listener and capture another node's token."""

# RFC 1123 host names, lower case, no wildcard: a wildcard certificate would speak for every node.
_LABEL: Final = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_HOST_NAME: Final = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
_MAX_HOST_NAME: Final = 253


@dataclass(frozen=True)
class SanPolicy:
    """Which DNS names and IP addresses of a CSR the CA may copy into a certificate.

    A name outside the policy refuses the whole request, rather than being dropped, so the node learns
    at enrollment, not at its first connection, that it would not be reachable under that name.

    Attributes:
        dns_names: the host names that may be certified (compared case-insensitively); ``None``
            allows any well-formed host name, an empty set allows none. Wildcards are never allowed.
        ip_networks: the networks whose addresses may be certified; ``None`` allows any address,
            an empty tuple allows none.
        max_names: the most names (DNS and IP together) one certificate may carry.
        refused_dns_names: host names never certified whatever else allows them (the master's own,
            so no node can pass for the master); compared case-insensitively. Names under
            :data:`RESERVED_DNS_SUFFIX` are refused by every policy.
        refused_ip_addresses: addresses never certified (the master's own).
    """

    dns_names: frozenset[str] | None = None
    ip_networks: tuple[IpNetwork, ...] | None = None
    max_names: int = 16
    refused_dns_names: frozenset[str] = frozenset()
    refused_ip_addresses: frozenset[IpAddress] = frozenset()

    @classmethod
    def deny_all(cls) -> SanPolicy:
        """A policy that certifies no DNS name and no address (the certificate names its subject only)."""
        return cls(dns_names=frozenset(), ip_networks=())

    def check(self, dns_names: Iterable[str], ip_addresses: Iterable[IpAddress]) -> None:
        """Raise :class:`CertificateRequestError` for the first requested name the policy refuses."""
        dns, ips = list(dns_names), list(ip_addresses)
        if len(dns) + len(ips) > self.max_names:
            raise CertificateRequestError(
                f"the CSR asks for {len(dns) + len(ips)} names; at most {self.max_names}"
            )
        for name in dns:
            if len(name) > _MAX_HOST_NAME or not _HOST_NAME.fullmatch(name.lower()):
                raise CertificateRequestError(f"the CSR asks for {name!r}, which is not a plain host name")
            if _reserved(name) or name.lower() in {n.lower() for n in self.refused_dns_names}:
                raise CertificateRequestError(
                    f"the CSR asks for DNS name {name!r}, which names the master; a node may not carry it"
                )
            if self.dns_names is not None and name.lower() not in {n.lower() for n in self.dns_names}:
                raise CertificateRequestError(
                    f"the CSR asks for DNS name {name!r}, which this CA may not certify"
                )
        for address in ips:
            if address in self.refused_ip_addresses:
                raise CertificateRequestError(
                    f"the CSR asks for address {address}, which is the master's; a node may not carry it"
                )
            if self.ip_networks is not None and not any(address in net for net in self.ip_networks):
                raise CertificateRequestError(
                    f"the CSR asks for address {address}, which this CA may not certify"
                )


def _reserved(name: str) -> bool:
    folded = name.lower().rstrip(".")
    return folded == RESERVED_DNS_SUFFIX or folded.endswith("." + RESERVED_DNS_SUFFIX)


def create_certificate_request(
    key: PrivateKey,
    common_name: str,
    *,
    dns_names: Iterable[str] = (),
    ip_addresses: Iterable[IpAddress] = (),
) -> x509.CertificateSigningRequest:
    """Create a CSR signed with ``key`` for a node.

    Args:
        key: the node's private key (it never leaves the node; the CSR carries the public half).
        common_name: the node name.
        dns_names: host names the master will use to reach the node.
        ip_addresses: addresses the master will use to reach the node.
    """
    builder = x509.CertificateSigningRequestBuilder().subject_name(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    )
    names = [x509.DNSName(name) for name in dns_names] + [x509.IPAddress(ip) for ip in ip_addresses]
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(key, hashes.SHA256())


def certificate_request_to_pem(request: x509.CertificateSigningRequest) -> bytes:
    """Encode a CSR as PEM."""
    return request.public_bytes(serialization.Encoding.PEM)


def certificate_request_from_pem(data: bytes) -> x509.CertificateSigningRequest:
    """Decode a PEM CSR.

    Raises:
        CertificateRequestError: the data is not a PEM certificate signing request.
    """
    try:
        request = x509.load_pem_x509_csr(data)
    except ValueError as exc:
        raise CertificateRequestError(f"not a PEM certificate signing request: {exc}") from None
    # cryptography reads the key lazily: a point off the curve parses here and fails later, deep in
    # issuing, as a bare ValueError. Reading it now makes it the request's fault, as it is.
    check_request_key(request)
    return request


def check_request_key(request: x509.CertificateSigningRequest) -> None:
    """Check that a CSR's public key can be read (and so its signature checked).

    Raises:
        CertificateRequestError: the key is corrupted or of a kind this library cannot read.
    """
    try:
        request.public_key()
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise CertificateRequestError(f"the CSR's public key cannot be read: {exc}") from None


def requested_names(request: x509.CertificateSigningRequest) -> tuple[list[str], list[IpAddress]]:
    """Return the DNS names and IP addresses a CSR asks for in its subject alternative names.

    Raises:
        CertificateRequestError: the CSR asks for another kind of name (an e-mail address, a URI, an
            IP network), which Mirbad never certifies.
    """
    try:
        san = request.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return [], []
    dns: list[str] = []
    ips: list[IpAddress] = []
    for entry in san:
        if isinstance(entry, x509.DNSName):
            dns.append(entry.value)
        elif isinstance(entry, x509.IPAddress) and isinstance(entry.value, IpAddress):
            ips.append(entry.value)
        else:
            raise CertificateRequestError(
                f"the CSR asks for {entry}, but only DNS names and addresses are certified"
            )
    return dns, ips
