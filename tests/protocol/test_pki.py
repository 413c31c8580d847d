"""The fleet PKI: CA, certificates from CSRs, key files, SPKI pins, and mutual TLS over loopback."""

from __future__ import annotations

import base64
import ipaddress
import os
import socket
import ssl
import stat
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.x509.oid import ExtendedKeyUsageOID
from hypothesis import given
from hypothesis import strategies as st

from mirbad_protocol import (
    CertificateRequestError,
    InsecureKeyFileError,
    MirbadProtocolError,
    PinMismatchError,
    PkiError,
)
from mirbad_protocol.pki import (
    CA_CERTIFICATE_FILE,
    CA_KEY_FILE,
    DEFAULT_LEAF_VALIDITY,
    ENROLL_LISTENER_NAME,
    RESERVED_DNS_SUFFIX,
    CertificateAuthority,
    PrivateKey,
    SanPolicy,
    TlsCredentials,
    certificate_identity,
    certificate_request_from_pem,
    certificate_request_to_pem,
    certificates_to_pem,
    client_context,
    create_certificate_request,
    generate_private_key,
    peer_certificate,
    private_key_to_pem,
    read_private_key,
    server_context,
    spki_pin,
    verify_pinned_chain,
    write_private_key,
)

TIMEOUT = 10.0
LOOPBACK = ipaddress.ip_address("127.0.0.1")
posix_only = pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX")


@dataclass(frozen=True)
class Identity:
    certificate: x509.Certificate
    key: PrivateKey


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority.create("Test CA")


@pytest.fixture(scope="module")
def other_ca() -> CertificateAuthority:
    return CertificateAuthority.create("Other CA")


def node_identity(ca: CertificateAuthority, name: str = "node-1") -> Identity:
    key = generate_private_key()
    request = create_certificate_request(key, name, dns_names=["localhost"], ip_addresses=[LOOPBACK])
    return Identity(ca.issue_from_csr(request, policy=SanPolicy()), key)


def master_identity(
    ca: CertificateAuthority, *, now: datetime | None = None, validity: timedelta = DEFAULT_LEAF_VALIDITY
) -> Identity:
    key = generate_private_key()
    return Identity(
        ca.issue_client_certificate(key.public_key(), "mirbad-master", now=now, validity=validity), key
    )


@pytest.fixture(scope="module")
def node(ca: CertificateAuthority) -> Identity:
    return node_identity(ca)


@pytest.fixture(scope="module")
def master(ca: CertificateAuthority) -> Identity:
    return master_identity(ca)


# ---------------------------------------------------------------- loopback handshakes


@dataclass
class Outcome:
    server_saw: x509.Certificate | None = None
    server_error: OSError | None = None
    client_saw: x509.Certificate | None = None
    client_error: OSError | None = None


def handshake(server: ssl.SSLContext, client: ssl.SSLContext, server_hostname: str = "localhost") -> Outcome:
    """Run one TLS connection over loopback and report what each side saw or why it failed."""
    outcome = Outcome()
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(TIMEOUT)
        thread = threading.Thread(target=_serve_once, args=(listener, server, outcome), daemon=True)
        thread.start()
        try:
            with (
                socket.create_connection(listener.getsockname()[:2], timeout=TIMEOUT) as raw,
                client.wrap_socket(raw, server_hostname=server_hostname) as tls,
            ):
                outcome.client_saw = peer_certificate(tls)
                # Under TLS 1.3 the server judges the client certificate after the client's handshake
                # returns, so a refusal only shows up on the first read.
                if tls.recv(2) != b"ok":
                    raise ConnectionError("the server closed the connection without answering")
        except OSError as exc:
            outcome.client_error = exc
        thread.join(TIMEOUT)
        assert not thread.is_alive(), "the server thread did not finish"
    return outcome


def _serve_once(listener: socket.socket, context: ssl.SSLContext, outcome: Outcome) -> None:
    try:
        connection, _ = listener.accept()
        connection.settimeout(TIMEOUT)
        with context.wrap_socket(connection, server_side=True) as tls:
            outcome.server_saw = peer_certificate(tls)
            tls.sendall(b"ok")
    except OSError as exc:
        outcome.server_error = exc


def agent_context(node: Identity, ca: CertificateAuthority) -> ssl.SSLContext:
    return server_context(node.certificate, node.key, ca.certificate)


def test_mutual_tls_both_sides_see_each_others_identity(
    ca: CertificateAuthority, node: Identity, master: Identity
) -> None:
    outcome = handshake(
        agent_context(node, ca), client_context(master.certificate, master.key, ca.certificate)
    )

    assert outcome.client_error is None
    assert outcome.server_error is None
    assert outcome.server_saw is not None
    assert outcome.client_saw is not None
    assert certificate_identity(outcome.server_saw).common_name == "mirbad-master"
    seen_by_master = certificate_identity(outcome.client_saw)
    assert seen_by_master.common_name == "node-1"
    assert seen_by_master.dns_names == ("localhost",)
    assert seen_by_master.ip_addresses == (LOOPBACK,)


def test_the_master_reaches_an_agent_by_address_too(
    ca: CertificateAuthority, node: Identity, master: Identity
) -> None:
    client = client_context(master.certificate, master.key, ca.certificate)

    outcome = handshake(agent_context(node, ca), client, server_hostname="127.0.0.1")

    assert outcome.client_error is None
    assert outcome.server_error is None


def test_a_client_without_a_certificate_is_refused(ca: CertificateAuthority, node: Identity) -> None:
    anonymous = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    anonymous.load_verify_locations(cadata=certificates_to_pem([ca.certificate]).decode())

    outcome = handshake(agent_context(node, ca), anonymous)

    assert isinstance(outcome.server_error, ssl.SSLError)
    assert outcome.server_saw is None
    assert outcome.client_error is not None


def test_a_client_certificate_from_another_ca_is_refused(
    ca: CertificateAuthority, other_ca: CertificateAuthority, node: Identity
) -> None:
    stranger = master_identity(other_ca)
    # The stranger trusts our CA, so only the agent's check of the client certificate can stop it.
    client = client_context(stranger.certificate, stranger.key, ca.certificate)

    outcome = handshake(agent_context(node, ca), client)

    assert isinstance(outcome.server_error, ssl.SSLCertVerificationError)
    assert outcome.server_saw is None
    assert outcome.client_error is not None


def test_a_client_from_another_ca_with_the_same_name_is_refused(
    ca: CertificateAuthority, node: Identity
) -> None:
    # Every master's CA may carry the default name: only the signature tells them apart.
    twin = master_identity(CertificateAuthority.create(ca.certificate.subject.rfc4514_string()[3:]))
    assert twin.certificate.issuer == ca.certificate.subject

    outcome = handshake(agent_context(node, ca), client_context(twin.certificate, twin.key, ca.certificate))

    assert isinstance(outcome.server_error, ssl.SSLCertVerificationError)
    assert outcome.client_error is not None


def test_one_node_cannot_open_another_nodes_agent(ca: CertificateAuthority, node: Identity) -> None:
    # Enrolled nodes share the CA; only the clientAuth usage of the master's certificate opens an agent.
    other = client_context(node.certificate, node.key, ca.certificate)

    outcome = handshake(agent_context(node, ca), other)

    assert isinstance(outcome.server_error, ssl.SSLError)
    assert outcome.client_error is not None


def test_an_expired_client_certificate_is_refused(ca: CertificateAuthority, node: Identity) -> None:
    expired = master_identity(ca, now=datetime.now(UTC) - timedelta(days=30), validity=timedelta(days=1))
    client = client_context(expired.certificate, expired.key, ca.certificate)

    outcome = handshake(agent_context(node, ca), client)

    assert isinstance(outcome.server_error, ssl.SSLCertVerificationError)
    assert "expired" in str(outcome.server_error)
    assert outcome.client_error is not None


def test_the_master_refuses_an_agent_from_another_ca(
    ca: CertificateAuthority, other_ca: CertificateAuthority, master: Identity
) -> None:
    impostor = node_identity(other_ca)
    # The impostor would even accept the master's certificate: the refusal must come from the client.
    server = server_context(impostor.certificate, impostor.key, ca.certificate)

    outcome = handshake(server, client_context(master.certificate, master.key, ca.certificate))

    assert isinstance(outcome.client_error, ssl.SSLCertVerificationError)
    assert outcome.client_saw is None


def test_the_master_refuses_an_agent_under_a_name_it_was_not_certified_for(
    ca: CertificateAuthority, node: Identity, master: Identity
) -> None:
    client = client_context(master.certificate, master.key, ca.certificate)

    outcome = handshake(agent_context(node, ca), client, server_hostname="other-node.lan")

    assert isinstance(outcome.client_error, ssl.SSLCertVerificationError)


def test_contexts_trust_no_system_ca_and_start_at_tls_1_2(
    ca: CertificateAuthority, node: Identity, master: Identity
) -> None:
    server = agent_context(node, ca)
    client = client_context(master.certificate, master.key, ca.certificate)

    for context in (server, client):
        assert context.verify_mode == ssl.CERT_REQUIRED
        assert context.minimum_version == ssl.TLSVersion.TLSv1_2
        assert context.cert_store_stats()["x509_ca"] == 1
    assert client.check_hostname


def test_a_certificate_and_a_key_that_do_not_match_are_refused(
    ca: CertificateAuthority, node: Identity
) -> None:
    with pytest.raises(PkiError, match="cannot be used together"):
        server_context(node.certificate, generate_private_key(), ca.certificate)


# ---------------------------------------------------------------- the CA and issued certificates


def test_the_ca_certificate_is_a_self_signed_ca_limited_to_leaves(ca: CertificateAuthority) -> None:
    certificate = ca.certificate
    constraints = certificate.extensions.get_extension_for_class(x509.BasicConstraints)
    usage = certificate.extensions.get_extension_for_class(x509.KeyUsage).value

    certificate.verify_directly_issued_by(certificate)
    assert constraints.critical
    assert constraints.value.ca
    assert constraints.value.path_length == 0
    assert usage.key_cert_sign
    assert usage.crl_sign
    assert not usage.digital_signature
    assert certificate.extensions.get_extension_for_class(x509.SubjectKeyIdentifier)
    lifetime = certificate.not_valid_after_utc - certificate.not_valid_before_utc
    assert timedelta(days=3649) < lifetime < timedelta(days=3651)


def test_a_node_certificate_is_for_servers_only(ca: CertificateAuthority, node: Identity) -> None:
    certificate = node.certificate
    extensions = certificate.extensions
    ca_key_id = ca.certificate.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value.digest

    certificate.verify_directly_issued_by(ca.certificate)
    assert not extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert list(extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.SERVER_AUTH,
    ]
    assert extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value.key_identifier == ca_key_id
    lifetime = certificate.not_valid_after_utc - certificate.not_valid_before_utc
    assert timedelta(days=364) < lifetime < timedelta(days=366)


def test_the_master_certificate_is_for_clients_only(master: Identity) -> None:
    usage = master.certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value

    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]


def test_a_certificate_never_outlives_its_ca(ca: CertificateAuthority) -> None:
    key = generate_private_key()

    certificate = ca.issue_client_certificate(key.public_key(), "long", validity=timedelta(days=50_000))

    assert certificate.not_valid_after_utc == ca.certificate.not_valid_after_utc


def test_the_ca_may_name_the_subject_instead_of_the_csr(ca: CertificateAuthority) -> None:
    request = create_certificate_request(generate_private_key(), "what-the-node-thinks")

    certificate = ca.issue_from_csr(request, policy=SanPolicy(), common_name="gpu-7")

    assert certificate_identity(certificate).common_name == "gpu-7"


def test_a_csr_with_a_broken_signature_is_refused(ca: CertificateAuthority) -> None:
    request = create_certificate_request(generate_private_key(), "node-x")
    der = bytearray(request.public_bytes(serialization.Encoding.DER))
    der[-1] ^= 0x01
    forged = x509.load_der_x509_csr(bytes(der))

    with pytest.raises(CertificateRequestError, match="signature"):
        ca.issue_from_csr(forged, policy=SanPolicy())


def corrupt_public_key(request: x509.CertificateSigningRequest, key: PrivateKey) -> bytes:
    """The CSR's PEM with its public point moved off the curve (the DER still parses)."""
    der = bytearray(request.public_bytes(serialization.Encoding.DER))
    point = key.public_key().public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    der[der.find(point) + 5] ^= 0xFF
    body = base64.encodebytes(bytes(der))
    return b"-----BEGIN CERTIFICATE REQUEST-----\n" + body + b"-----END CERTIFICATE REQUEST-----\n"


def test_a_csr_with_a_corrupted_key_is_refused_when_read(ca: CertificateAuthority) -> None:
    key = generate_private_key()
    pem = corrupt_public_key(create_certificate_request(key, "node-x"), key)

    with pytest.raises(CertificateRequestError, match="key"):
        certificate_request_from_pem(pem)


def test_a_csr_object_with_a_corrupted_key_is_refused_by_the_ca(ca: CertificateAuthority) -> None:
    key = generate_private_key()
    der = bytearray(create_certificate_request(key, "node-x").public_bytes(serialization.Encoding.DER))
    point = key.public_key().public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    der[der.find(point) + 5] ^= 0xFF

    with pytest.raises(CertificateRequestError, match="key"):
        ca.issue_from_csr(x509.load_der_x509_csr(bytes(der)), policy=SanPolicy())


def test_csr_pem_round_trip_and_garbage() -> None:
    request = create_certificate_request(generate_private_key(), "node-x", dns_names=["node-x.lan"])

    assert certificate_request_from_pem(certificate_request_to_pem(request)) == request
    with pytest.raises(CertificateRequestError, match="not a PEM certificate signing request"):
        certificate_request_from_pem(b"hello")


def test_names_outside_the_policy_refuse_the_request(ca: CertificateAuthority) -> None:
    policy = SanPolicy(dns_names=frozenset({"Node-1.lan"}), ip_networks=(ipaddress.ip_network("10.0.0.0/8"),))
    key = generate_private_key()
    allowed = create_certificate_request(
        key, "node-1", dns_names=["node-1.LAN"], ip_addresses=[ipaddress.ip_address("10.1.2.3")]
    )
    wrong_name = create_certificate_request(key, "node-1", dns_names=["master.lan"])
    wrong_address = create_certificate_request(key, "node-1", ip_addresses=[LOOPBACK])

    identity = certificate_identity(ca.issue_from_csr(allowed, policy=policy))

    assert identity.dns_names == ("node-1.LAN",)
    with pytest.raises(CertificateRequestError, match=r"'master\.lan'"):
        ca.issue_from_csr(wrong_name, policy=policy)
    with pytest.raises(CertificateRequestError, match=r"127\.0\.0\.1"):
        ca.issue_from_csr(wrong_address, policy=policy)
    with pytest.raises(CertificateRequestError):
        ca.issue_from_csr(allowed, policy=SanPolicy.deny_all())


def test_wildcards_and_other_name_kinds_are_never_certified(ca: CertificateAuthority) -> None:
    key = generate_private_key()
    wildcard = create_certificate_request(key, "node-1", dns_names=["*.lan"])
    builder = x509.CertificateSigningRequestBuilder().subject_name(x509.Name.from_rfc4514_string("CN=node-1"))
    email = builder.add_extension(
        x509.SubjectAlternativeName([x509.RFC822Name("root@lan")]), critical=False
    ).sign(key, hashes.SHA256())

    with pytest.raises(CertificateRequestError, match="not a plain host name"):
        ca.issue_from_csr(wildcard, policy=SanPolicy())
    with pytest.raises(CertificateRequestError, match="only DNS names and addresses"):
        ca.issue_from_csr(email, policy=SanPolicy())


_LABEL = st.from_regex(r"[a-z0-9](?:[a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True)


@given(st.lists(_LABEL, min_size=1, max_size=4).map(".".join).filter(lambda n: "mirbad.invalid" not in n))
def test_a_policy_admits_exactly_its_names_in_any_case(name: str) -> None:
    SanPolicy(dns_names=frozenset({name.upper()})).check([name], [])
    SanPolicy().check([name], [])
    with pytest.raises(CertificateRequestError):
        SanPolicy(dns_names=frozenset({f"x{name}"})).check([name], [])
    with pytest.raises(CertificateRequestError):
        SanPolicy.deny_all().check([name], [])


@pytest.mark.parametrize(
    "name", [ENROLL_LISTENER_NAME, "ENROLL.Mirbad.Invalid", RESERVED_DNS_SUFFIX, "x.mirbad.invalid"]
)
def test_no_policy_certifies_a_node_for_the_masters_reserved_names(
    ca: CertificateAuthority, name: str
) -> None:
    # issue 31 item 14: the enroll listener's name is the master's alone.
    request = create_certificate_request(generate_private_key(), "rogue", dns_names=[name])
    for policy in (SanPolicy(), SanPolicy(dns_names=frozenset({name}))):
        with pytest.raises(CertificateRequestError, match="names the master"):
            ca.issue_from_csr(request, policy=policy)


def test_a_policy_refuses_the_masters_own_names_and_addresses(ca: CertificateAuthority) -> None:
    master_address = ipaddress.ip_address("10.0.0.5")
    policy = SanPolicy(
        refused_dns_names=frozenset({"Master.lan"}), refused_ip_addresses=frozenset({master_address})
    )
    by_name = create_certificate_request(generate_private_key(), "rogue", dns_names=["master.LAN"])
    by_address = create_certificate_request(generate_private_key(), "rogue", ip_addresses=[master_address])
    honest = create_certificate_request(
        generate_private_key(), "gpu-1", dns_names=["gpu-1.lan"], ip_addresses=[LOOPBACK]
    )
    with pytest.raises(CertificateRequestError, match="names the master"):
        ca.issue_from_csr(by_name, policy=policy)
    with pytest.raises(CertificateRequestError, match="is the master's"):
        ca.issue_from_csr(by_address, policy=policy)
    assert ca.issue_from_csr(honest, policy=policy).subject.rfc4514_string() == "CN=gpu-1"


def test_only_the_enroll_listener_certificate_carries_the_reserved_name(ca: CertificateAuthority) -> None:
    key = generate_private_key()
    certificate = ca.issue_enroll_listener_certificate(
        key.public_key(), dns_names=["master.lan"], ip_addresses=[LOOPBACK]
    )
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == [ENROLL_LISTENER_NAME, "master.lan"]
    assert names.get_values_for_type(x509.IPAddress) == [LOOPBACK]
    usage = certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.SERVER_AUTH]
    certificate.verify_directly_issued_by(ca.certificate)


def test_a_ca_key_and_certificate_must_match(
    ca: CertificateAuthority, other_ca: CertificateAuthority
) -> None:
    with pytest.raises(PkiError, match="does not belong"):
        CertificateAuthority(ca.certificate, other_ca.private_key)


def test_errors_share_the_protocol_root() -> None:
    assert issubclass(CertificateRequestError, PkiError)
    assert issubclass(PinMismatchError, PkiError)
    assert issubclass(PkiError, MirbadProtocolError)


# ---------------------------------------------------------------- key files


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@posix_only
def test_keys_are_written_0600_whatever_the_umask(tmp_path: Path) -> None:
    previous = os.umask(0)
    try:
        write_private_key(tmp_path / "node.key", generate_private_key())
    finally:
        os.umask(previous)

    assert mode_of(tmp_path / "node.key") == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["node.key"]


@posix_only
def test_a_key_readable_by_others_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "node.key"
    write_private_key(path, generate_private_key())
    path.chmod(0o644)

    with pytest.raises(InsecureKeyFileError, match="chmod 600") as refused:
        read_private_key(path)

    assert refused.value.mode == 0o644
    with pytest.raises(InsecureKeyFileError):
        server_context(Path("unused.crt"), path, Path("unused-ca.crt"))


def test_a_file_that_is_not_a_key_is_refused_with_its_path(tmp_path: Path) -> None:
    path = tmp_path / "node.key"
    path.write_bytes(b"not a key")
    path.chmod(0o600)

    with pytest.raises(PkiError, match=r"node\.key"):
        read_private_key(path)


@posix_only
def test_the_ca_saves_and_loads(tmp_path: Path, ca: CertificateAuthority) -> None:
    ca.save(tmp_path)

    loaded = CertificateAuthority.load(tmp_path)

    assert loaded.pin == ca.pin
    assert loaded.certificate == ca.certificate
    assert mode_of(tmp_path / CA_KEY_FILE) == 0o600
    assert mode_of(tmp_path / CA_CERTIFICATE_FILE) == 0o644


def test_credentials_on_disk_build_working_contexts(
    tmp_path: Path, ca: CertificateAuthority, node: Identity, master: Identity
) -> None:
    TlsCredentials(node.certificate, node.key, (ca.certificate,)).save(tmp_path, "agent")
    (tmp_path / "master.pem").write_bytes(certificates_to_pem([master.certificate]))
    (tmp_path / "master.key").write_bytes(private_key_to_pem(master.key))
    (tmp_path / "master.key").chmod(0o600)

    agent = TlsCredentials.load(tmp_path, "agent")
    client = client_context(tmp_path / "master.pem", tmp_path / "master.key", tmp_path / "agent-ca.crt")
    outcome = handshake(agent.server_context(), client)

    assert outcome.client_error is None
    assert outcome.server_error is None
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "agent-ca.crt", "agent.crt", "agent.key", "master.key", "master.pem"
    ]  # fmt: skip


# ---------------------------------------------------------------- pins


def test_pins_name_keys_and_differ_across_keys(
    ca: CertificateAuthority, node: Identity, master: Identity
) -> None:
    reissued = ca.issue_client_certificate(node.key.public_key(), "node-1-again")

    assert spki_pin(node.certificate) == spki_pin(node.key) == spki_pin(reissued)
    assert spki_pin(node.certificate) == spki_pin(node.certificate)
    assert len({spki_pin(node.key), spki_pin(master.key), ca.pin}) == 3
    assert len(base64.b64decode(ca.pin, validate=True)) == 32


def test_a_chain_verifies_against_its_pinned_ca(
    ca: CertificateAuthority, node: Identity, master: Identity
) -> None:
    verify_pinned_chain([master.certificate], ca.certificate, ca.pin)
    verify_pinned_chain([node.certificate], ca.certificate, ca.pin, server_name="127.0.0.1")
    verify_pinned_chain([node.certificate], ca.certificate, ca.pin, server_name="localhost")


def test_a_chain_against_the_wrong_pin_or_ca_is_refused(
    ca: CertificateAuthority, other_ca: CertificateAuthority, node: Identity
) -> None:
    with pytest.raises(PinMismatchError, match="pin"):
        verify_pinned_chain([node.certificate], ca.certificate, other_ca.pin)
    with pytest.raises(PinMismatchError, match="does not verify"):
        verify_pinned_chain([node.certificate], other_ca.certificate, other_ca.pin)
    with pytest.raises(PinMismatchError, match="does not verify"):
        verify_pinned_chain([node.certificate], ca.certificate, ca.pin, server_name="elsewhere.lan")
    with pytest.raises(PinMismatchError, match="does not verify"):
        verify_pinned_chain(
            [node.certificate], ca.certificate, ca.pin, now=datetime.now(UTC) + timedelta(days=400)
        )
    with pytest.raises(PinMismatchError, match="no certificate"):
        verify_pinned_chain([], ca.certificate, ca.pin)
