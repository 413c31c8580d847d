"""The master's certificates on disk: the fleet CA and the master's own client identity.

Both live in ``{data_dir}/pki`` (folder 0700, keys 0600). The CA is created on the first run and then
kept for good: every node trusts it, so a new CA means enrolling every node again. The master's client
certificate (the only certificate that opens an agent) is re-issued when it nears its end or no longer
chains to the CA. The enroll listener's server certificate is issued anew at every start, for the names
the listener is reached at.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final

from cryptography.exceptions import InvalidSignature

from mirbad_protocol import PkiError
from mirbad_protocol.pki import (
    CertificateAuthority,
    IpAddress,
    SanPolicy,
    TlsCredentials,
    generate_private_key,
    spki_pin,
)

__all__ = [
    "MASTER_TLS_STEM",
    "PKI_FOLDER",
    "enroll_listener_names",
    "load_or_create_authority",
    "load_or_issue_master_identity",
    "master_names_refused",
]

PKI_FOLDER: Final = "pki"
"""The PKI folder inside the data directory."""
MASTER_TLS_STEM: Final = "master"
"""The file stem of the master's client identity (``master.key``, ``master.crt``, ``master-ca.crt``)."""

_RENEW_BEFORE: Final = timedelta(days=30)
_HOST_NAME: Final = re.compile(
    r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*"
)


def load_or_create_authority(pki_dir: Path) -> CertificateAuthority:
    """The fleet CA from ``pki_dir``, created (and saved) when there is none.

    Raises:
        PkiError: the CA files exist but cannot be used (never replaced silently: nodes trust them).
        OSError: the folder cannot be read or written.
    """
    pki_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not (pki_dir / "ca.crt").exists():
        authority = CertificateAuthority.create(f"Mirbad CA {socket.gethostname()}"[:64])
        authority.save(pki_dir)
        return authority
    return CertificateAuthority.load(pki_dir)


def load_or_issue_master_identity(pki_dir: Path, authority: CertificateAuthority) -> TlsCredentials:
    """The master's client certificate, issued again when missing, expiring or from another CA."""
    try:
        current = TlsCredentials.load(pki_dir, MASTER_TLS_STEM)
    except (OSError, PkiError):
        current = None
    if current is not None and _still_good(current, authority):
        return current
    key = generate_private_key()
    certificate = authority.issue_client_certificate(key.public_key(), "mirbad-master")
    identity = TlsCredentials(certificate, key, (authority.certificate,))
    identity.save(pki_dir, MASTER_TLS_STEM)
    return identity


def enroll_listener_names(host: str) -> list[str]:
    """The names the enroll listener's certificate carries: loopback, ``host`` and this machine's name."""
    names = ["127.0.0.1", "localhost"]
    if host not in ("0.0.0.0", "::", "", *names):  # noqa: S104
        names.append(host)
    machine = socket.gethostname().lower()
    if _HOST_NAME.fullmatch(machine) and machine not in names:
        names.append(machine)
    return names


def master_names_refused(host: str) -> SanPolicy:
    """The enrollment CSR policy: a node may carry any name but the master's own.

    The master's names are the enroll listener's (:func:`enroll_listener_names`) less the loopback
    ones: ``localhost`` and ``127.0.0.1`` name each machine itself, so a node's certificate for them
    speaks for that node alone (and agents on the master's machine are reached there).
    """
    dns_names: set[str] = set()
    addresses: set[IpAddress] = set()
    for name in enroll_listener_names(host):
        try:
            address = ipaddress.ip_address(name)
        except ValueError:
            if name.lower() != "localhost":
                dns_names.add(name.lower())
            continue
        if not address.is_loopback:
            addresses.add(address)
    return SanPolicy(refused_dns_names=frozenset(dns_names), refused_ip_addresses=frozenset(addresses))


def _still_good(identity: TlsCredentials, authority: CertificateAuthority) -> bool:
    trusted = [spki_pin(ca) for ca in identity.ca_certificates]
    if spki_pin(authority.certificate) not in trusted:
        return False
    try:
        identity.certificate.verify_directly_issued_by(authority.certificate)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return identity.certificate.not_valid_after_utc - datetime.now(UTC) > _RENEW_BEFORE
