"""The master's enroll listener: in process for every answer, then over real TLS on loopback."""

from __future__ import annotations

import base64
import ipaddress
import json
import secrets
import socket
import ssl
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from tests._support.enroll_master import enroll_master
from tests.master._stack import running_master

from mirbad_master._enroll_listener import (
    MAX_ENROLL_BODY_BYTES,
    create_enroll_app,
    issue_enroll_server_credentials,
)
from mirbad_master._local_pki import enroll_listener_names
from mirbad_orchestration.fleet import ENROLLMENT_TOKENS_FILE, EnrollmentTokens
from mirbad_orchestration.testing import FakeClock
from mirbad_protocol.pki import (
    ENROLL_CA_PATH,
    ENROLL_LISTENER_NAME,
    ENROLL_PATH,
    CertificateAuthority,
    EnrollErrorBody,
    EnrollResponse,
    IpAddress,
    JoinToken,
    PrivateKey,
    certificate_identity,
    certificate_request_to_pem,
    certificates_from_pem,
    certificates_to_pem,
    create_certificate_request,
    generate_private_key,
    spki_pin,
    verify_pinned_chain,
)

pytestmark = pytest.mark.anyio

TIMEOUT_S = 10.0


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority.create("Enroll listener test CA")


@pytest.fixture(scope="module")
def node_key() -> PrivateKey:
    return generate_private_key()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime.now(UTC))  # certificates are checked against the real time


@pytest.fixture
def tokens(tmp_path: Path, ca: CertificateAuthority, clock: FakeClock) -> EnrollmentTokens:
    return EnrollmentTokens(tmp_path / ENROLLMENT_TOKENS_FILE, ca, clock=clock)


@pytest.fixture
async def client(tokens: EnrollmentTokens, ca: CertificateAuthority) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_enroll_app(tokens, ca.certificate))
    async with httpx.AsyncClient(transport=transport, base_url="https://master") as in_process:
        yield in_process


def csr_pem(key: PrivateKey, *, dns: tuple[str, ...] = ("gpu-1.lan",)) -> str:
    request = create_certificate_request(key, "asked-name", dns_names=dns)
    return certificate_request_to_pem(request).decode()


def refusal(response: httpx.Response) -> tuple[int, str, str]:
    error = EnrollErrorBody.from_wire(response.json()).error
    return response.status_code, error.code, error.message


async def test_the_ca_certificate_is_public(client: httpx.AsyncClient, ca: CertificateAuthority) -> None:
    response = await client.get(ENROLL_CA_PATH)

    assert response.status_code == 200
    assert response.headers["content-type"] == "application/x-pem-file"
    assert certificates_from_pem(response.content) == [ca.certificate]


async def test_a_join_token_and_a_csr_yield_a_certificate(
    client: httpx.AsyncClient, tokens: EnrollmentTokens, ca: CertificateAuthority, node_key: PrivateKey
) -> None:
    token = await tokens.issue_join_token("gpu-1")

    response = await client.post(ENROLL_PATH, json={"token": token, "csr": csr_pem(node_key)})

    assert response.status_code == 200
    assert set(response.json()) == {"nodeName", "certificate", "caCertificate"}
    answer = EnrollResponse.from_wire(response.json())
    certificate = certificates_from_pem(answer.certificate.encode())[0]
    assert answer.node_name == "gpu-1"
    assert certificate_identity(certificate).common_name == "gpu-1"  # the token's name, not the CSR's
    assert spki_pin(certificate) == spki_pin(node_key)
    assert certificates_from_pem(answer.ca_certificate.encode()) == [ca.certificate]
    verify_pinned_chain([certificate], ca.certificate, ca.pin, server_name="gpu-1.lan")


async def test_a_reused_token_is_409(
    client: httpx.AsyncClient, tokens: EnrollmentTokens, node_key: PrivateKey
) -> None:
    token = await tokens.issue_join_token("gpu-1")
    await client.post(ENROLL_PATH, json={"token": token, "csr": csr_pem(node_key)})

    response = await client.post(ENROLL_PATH, json={"token": token, "csr": csr_pem(node_key)})

    status, code, message = refusal(response)
    assert (status, code) == (409, "token_used")
    assert "already used" in message


async def test_an_expired_token_is_410(
    client: httpx.AsyncClient, tokens: EnrollmentTokens, clock: FakeClock, node_key: PrivateKey
) -> None:
    token = await tokens.issue_join_token("gpu-1", ttl=timedelta(minutes=5))
    await clock.advance(timedelta(minutes=5))

    status, code, message = refusal(
        await client.post(ENROLL_PATH, json={"token": token, "csr": csr_pem(node_key)})
    )

    assert (status, code) == (410, "token_expired")
    assert "expired" in message


@pytest.mark.parametrize("forge", ["secret", "pin", "bare"])
async def test_a_forged_token_is_401(
    client: httpx.AsyncClient,
    tokens: EnrollmentTokens,
    ca: CertificateAuthority,
    node_key: PrivateKey,
    forge: str,
) -> None:
    genuine = JoinToken.parse(await tokens.issue_join_token("gpu-1"))
    forged = {
        "secret": JoinToken(ca.pin, secrets.token_urlsafe(32)).encode(),
        "pin": JoinToken(CertificateAuthority.create("rogue").pin, genuine.secret).encode(),
        "bare": secrets.token_urlsafe(32),
    }[forge]

    status, code, message = refusal(
        await client.post(ENROLL_PATH, json={"token": forged, "csr": csr_pem(node_key)})
    )

    assert (status, code) == (401, "token_unknown")
    assert "not recognised" in message


async def test_a_bad_csr_is_400_and_leaves_the_token_usable(
    client: httpx.AsyncClient, tokens: EnrollmentTokens, node_key: PrivateKey
) -> None:
    token = await tokens.issue_join_token("gpu-1")

    for bad in ["not a csr", csr_pem(node_key, dns=("*.lan",)), "\u00e9"]:
        response = await client.post(ENROLL_PATH, json={"token": token, "csr": bad})
        assert refusal(response)[:2] == (400, "csr_rejected"), bad
    # json.dumps escapes a lone surrogate as \udc80, as a hostile client could send it.
    response = await client.post(ENROLL_PATH, content=json.dumps({"token": token, "csr": "\udc80"}).encode())
    assert response.status_code == 400

    response = await client.post(ENROLL_PATH, json={"token": token, "csr": csr_pem(node_key)})
    assert response.status_code == 200


async def test_a_csr_with_a_corrupted_key_is_400_not_500(
    client: httpx.AsyncClient, tokens: EnrollmentTokens, node_key: PrivateKey
) -> None:
    token = await tokens.issue_join_token("gpu-1")
    der = bytearray(certificate_request_to_der(node_key))
    point = node_key.public_key().public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)
    der[der.find(point) + 5] ^= 0xFF  # the point leaves the curve; the DER still parses
    pem = "-----BEGIN CERTIFICATE REQUEST-----\n" + base64.encodebytes(bytes(der)).decode()
    pem += "-----END CERTIFICATE REQUEST-----\n"

    response = await client.post(ENROLL_PATH, json={"token": token, "csr": pem})

    status, code, message = refusal(response)
    assert (status, code) == (400, "csr_rejected")
    assert "key" in message
    assert (
        await client.post(ENROLL_PATH, json={"token": token, "csr": csr_pem(node_key)})
    ).status_code == 200


def certificate_request_to_der(key: PrivateKey) -> bytes:
    return create_certificate_request(key, "asked-name").public_bytes(Encoding.DER)


@pytest.mark.parametrize(
    ("content", "field"),
    [(b"{not json", "(document)"), (b'{"token": "t"}', "csr"), (b'{"token": "", "csr": "c"}', "token")],
)
async def test_a_malformed_body_is_400_naming_the_field(
    client: httpx.AsyncClient, content: bytes, field: str
) -> None:
    response = await client.post(ENROLL_PATH, content=content, headers={"content-type": "application/json"})

    assert refusal(response)[:2] == (400, "invalid_request")
    assert response.json()["error"]["field"] == field


async def test_an_oversized_body_is_413(client: httpx.AsyncClient) -> None:
    response = await client.post(ENROLL_PATH, content=b"x" * (MAX_ENROLL_BODY_BYTES + 1))

    assert refusal(response)[:2] == (413, "request_too_large")


async def test_a_broken_token_store_is_500_without_details(
    tmp_path: Path, ca: CertificateAuthority, node_key: PrivateKey
) -> None:
    broken = EnrollmentTokens(tmp_path, ca)  # a folder where the file should be
    transport = httpx.ASGITransport(app=create_enroll_app(broken, ca.certificate))
    async with httpx.AsyncClient(transport=transport, base_url="https://master") as in_process:
        token = JoinToken(ca.pin, secrets.token_urlsafe(32)).encode()
        response = await in_process.post(ENROLL_PATH, json={"token": token, "csr": csr_pem(node_key)})

    status, code, message = refusal(response)
    assert (status, code) == (500, "internal_error")
    assert str(tmp_path) not in message


async def test_only_get_and_post_are_routed(client: httpx.AsyncClient) -> None:
    assert (await client.get(ENROLL_PATH)).status_code == 405
    assert (await client.post(ENROLL_CA_PATH)).status_code == 405


def test_the_server_certificate_names_the_master(ca: CertificateAuthority) -> None:
    credentials = issue_enroll_server_credentials(ca, ["master.lan", "10.0.0.2"])

    identity = certificate_identity(credentials.certificate)
    assert identity.dns_names == (ENROLL_LISTENER_NAME, "master.lan")
    assert identity.ip_addresses == (ipaddress.ip_address("10.0.0.2"),)
    assert credentials.ca_certificates == (ca.certificate,)
    verify_pinned_chain([credentials.certificate], ca.certificate, ca.pin, server_name="master.lan")


async def test_a_node_enrolls_over_tls_without_a_client_certificate(
    tmp_path: Path, ca: CertificateAuthority, node_key: PrivateKey
) -> None:
    async with enroll_master(tmp_path, ca=ca) as master:
        token = await master.tokens.issue_join_token("gpu-1")
        trust = ssl.create_default_context(cadata=certificates_to_pem([ca.certificate]).decode())
        async with httpx.AsyncClient(verify=trust, trust_env=False, timeout=TIMEOUT_S) as node:
            ca_answer = await node.get(master.url + ENROLL_CA_PATH)
            response = await node.post(
                master.url + ENROLL_PATH, json={"token": token, "csr": csr_pem(node_key)}
            )

    assert certificates_from_pem(ca_answer.content) == [ca.certificate]
    assert response.status_code == 200
    certificate = certificates_from_pem(EnrollResponse.from_wire(response.json()).certificate.encode())[0]
    assert isinstance(certificate, x509.Certificate)
    assert spki_pin(certificate) == spki_pin(node_key)
    assert master.recorder.seen == [("GET", ENROLL_CA_PATH), ("POST", ENROLL_PATH)]


async def test_the_masters_enrollment_refuses_csrs_for_the_masters_names(tmp_path: Path) -> None:
    # issue 31 item 14: a node may not carry the master's address, its machine name or the reserved name.
    async with running_master(tmp_path, host="10.0.0.5") as master:
        enrollment = master.services.enrollment
        app = create_enroll_app(enrollment, master.services.authority.certificate)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="https://m") as client:
            token = await enrollment.issue_join_token("gpu-1")
            master_address = ipaddress.ip_address("10.0.0.5")
            loopback = ipaddress.ip_address("127.0.0.1")
            asks: list[tuple[list[str], list[IpAddress]]] = [
                ([], [master_address]),
                ([ENROLL_LISTENER_NAME], []),
            ]
            machine = socket.gethostname().lower()
            if machine in enroll_listener_names("10.0.0.5"):  # a machine name that is a host name
                asks.append(([machine], []))
            for dns, addresses in asks:
                request = create_certificate_request(
                    generate_private_key(), "gpu-1", dns_names=dns, ip_addresses=addresses
                )
                body = {"token": token, "csr": certificate_request_to_pem(request).decode()}
                status, code, message = refusal(await client.post(ENROLL_PATH, json=body))
                assert (status, code) == (400, "csr_rejected"), (dns, addresses)
                assert "master" in message
            # Loopback names each machine itself: an agent beside the master is reached there.
            request = create_certificate_request(
                generate_private_key(), "gpu-1", dns_names=["localhost"], ip_addresses=[loopback]
            )
            body = {"token": token, "csr": certificate_request_to_pem(request).decode()}
            assert (await client.post(ENROLL_PATH, json=body)).status_code == 200
