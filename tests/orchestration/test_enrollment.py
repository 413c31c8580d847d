"""Enrollment tokens: issued once, redeemed once, expiring, stored only as hashes."""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import re
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from syrupy.assertion import SnapshotAssertion

from mirbad_orchestration.exceptions import (
    EnrollmentError,
    EnrollmentStoreError,
    EnrollmentTokenError,
    EnrollmentTokenExpiredError,
    EnrollmentTokenUsedError,
    UnknownEnrollmentTokenError,
)
from mirbad_orchestration.fleet import ENROLLMENT_TOKENS_FILE, Enrollment, EnrollmentTokens
from mirbad_orchestration.testing import FakeClock
from mirbad_protocol import CertificateRequestError, InvalidFieldError, PinMismatchError
from mirbad_protocol.pki import (
    CertificateAuthority,
    PrivateKey,
    SanPolicy,
    certificate_identity,
    certificate_request_to_pem,
    create_certificate_request,
    generate_private_key,
    spki_pin,
    verify_pinned_chain,
)

pytestmark = pytest.mark.anyio

START = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
TIMEOUT = 10


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority.create("Enrollment test CA", now=START - timedelta(days=1))


@pytest.fixture(scope="module")
def node_key() -> PrivateKey:
    return generate_private_key()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def store(tmp_path: Path, ca: CertificateAuthority, clock: FakeClock) -> EnrollmentTokens:
    return EnrollmentTokens(tmp_path / ENROLLMENT_TOKENS_FILE, ca, clock=clock)


def csr_pem(key: PrivateKey, name: str = "gpu-1", **names: list[str]) -> bytes:
    addresses = [ipaddress.ip_address(ip) for ip in names.get("ips", [])]
    request = create_certificate_request(key, name, dns_names=names.get("dns", []), ip_addresses=addresses)
    return certificate_request_to_pem(request)


async def test_a_token_enrolls_its_node_once(
    store: EnrollmentTokens, ca: CertificateAuthority, node_key: PrivateKey
) -> None:
    token = await store.issue("gpu-1")

    enrollment = await store.redeem(token, csr_pem(node_key, dns=["gpu-1.lan"], ips=["10.0.0.7"]))

    assert isinstance(enrollment, Enrollment)
    assert enrollment.node_name == "gpu-1"
    assert enrollment.ca_certificate == ca.certificate
    assert spki_pin(enrollment.certificate) == spki_pin(node_key)
    identity = certificate_identity(enrollment.certificate)
    assert identity.common_name == "gpu-1"
    assert identity.dns_names == ("gpu-1.lan",)
    with pytest.raises(PinMismatchError):  # a node certificate never authenticates a client
        verify_pinned_chain([enrollment.certificate], enrollment.ca_certificate, ca.pin, now=START)
    verify_pinned_chain([enrollment.certificate], ca.certificate, ca.pin, now=START, server_name="10.0.0.7")


async def test_a_reused_token_is_refused(store: EnrollmentTokens, node_key: PrivateKey) -> None:
    token = await store.issue("gpu-1")
    await store.redeem(token, csr_pem(node_key))

    with pytest.raises(EnrollmentTokenUsedError, match="already used") as refused:
        await store.redeem(token, csr_pem(node_key))

    assert refused.value.used_at == START
    assert refused.value.node_name == "gpu-1"


async def test_an_expired_token_is_refused(
    store: EnrollmentTokens, clock: FakeClock, node_key: PrivateKey
) -> None:
    token = await store.issue("gpu-1", ttl=timedelta(minutes=10))
    await clock.advance(timedelta(minutes=10))

    with pytest.raises(EnrollmentTokenExpiredError, match="expired") as refused:
        await store.redeem(token, csr_pem(node_key))

    assert refused.value.expired_at == START + timedelta(minutes=10)


async def test_a_token_just_before_expiry_still_enrolls(
    store: EnrollmentTokens, clock: FakeClock, node_key: PrivateKey
) -> None:
    token = await store.issue("gpu-1", ttl=timedelta(minutes=10))
    await clock.advance(timedelta(minutes=10) - timedelta(microseconds=1))

    assert (await store.redeem(token, csr_pem(node_key))).node_name == "gpu-1"


async def test_a_forged_or_altered_token_is_unknown(store: EnrollmentTokens, node_key: PrivateKey) -> None:
    token = await store.issue("gpu-1")
    altered = token[:-1] + ("A" if token[-1] != "A" else "B")

    for attempt in (altered, "forged-token", "", "\ud800", "é" * 300):
        with pytest.raises(UnknownEnrollmentTokenError, match="not recognised"):
            await store.redeem(attempt, csr_pem(node_key))
    assert (await store.redeem(token, csr_pem(node_key))).node_name == "gpu-1"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(forged=st.text(max_size=64))
def test_no_guessed_token_enrolls(
    tmp_path: Path, ca: CertificateAuthority, node_key: PrivateKey, forged: str
) -> None:
    async def attempt() -> None:
        store = EnrollmentTokens(tmp_path / ENROLLMENT_TOKENS_FILE, ca, clock=FakeClock(START))
        await store.issue("gpu-1")
        with pytest.raises(UnknownEnrollmentTokenError):
            await store.redeem(forged, csr_pem(node_key))

    anyio.run(attempt)


async def test_tokens_are_stored_only_as_hashes_in_an_owner_only_file(
    store: EnrollmentTokens, tmp_path: Path
) -> None:
    token = await store.issue("gpu-1")
    path = tmp_path / ENROLLMENT_TOKENS_FILE

    text = path.read_text(encoding="utf-8")

    assert token not in text
    assert json.loads(text)["tokens"][0]["tokenSha256"] == _sha256(token)
    if os.name == "posix":
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


async def test_tokens_survive_a_restart_of_the_master(
    tmp_path: Path, ca: CertificateAuthority, clock: FakeClock, node_key: PrivateKey
) -> None:
    token = await EnrollmentTokens(tmp_path / ENROLLMENT_TOKENS_FILE, ca, clock=clock).issue("gpu-1")
    restarted = EnrollmentTokens(tmp_path / ENROLLMENT_TOKENS_FILE, ca, clock=clock)

    await restarted.redeem(token, csr_pem(node_key))

    with pytest.raises(EnrollmentTokenUsedError):
        await EnrollmentTokens(tmp_path / ENROLLMENT_TOKENS_FILE, ca, clock=clock).redeem(
            token, csr_pem(node_key)
        )


async def test_the_certificate_names_the_token_node_not_the_csr(
    store: EnrollmentTokens, node_key: PrivateKey
) -> None:
    token = await store.issue("gpu-1")

    enrollment = await store.redeem(token, csr_pem(node_key, name="some-other-name"))

    assert certificate_identity(enrollment.certificate).common_name == "gpu-1"


async def test_a_refused_csr_leaves_the_token_unspent(
    tmp_path: Path, ca: CertificateAuthority, clock: FakeClock, node_key: PrivateKey
) -> None:
    policy = SanPolicy(ip_networks=(ipaddress.ip_network("10.0.0.0/8"),))
    store = EnrollmentTokens(tmp_path / ENROLLMENT_TOKENS_FILE, ca, san_policy=policy, clock=clock)
    token = await store.issue("gpu-1")

    with pytest.raises(CertificateRequestError, match=r"192\.168\.1\.5"):
        await store.redeem(token, csr_pem(node_key, ips=["192.168.1.5"]))
    with pytest.raises(CertificateRequestError, match="not a PEM"):
        await store.redeem(token, b"garbage")

    assert (await store.redeem(token, csr_pem(node_key, ips=["10.1.1.1"]))).node_name == "gpu-1"


async def test_two_nodes_racing_for_one_token_enroll_one(
    store: EnrollmentTokens, node_key: PrivateKey
) -> None:
    token = await store.issue("gpu-1")
    outcomes: list[str] = []

    async def redeem() -> None:
        try:
            await store.redeem(token, csr_pem(node_key))
            outcomes.append("enrolled")
        except EnrollmentTokenUsedError:
            outcomes.append("refused")

    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as group:
            for _ in range(4):
                group.start_soon(redeem)

    assert sorted(outcomes) == ["enrolled", "refused", "refused", "refused"]


async def test_finished_tokens_are_pruned_after_the_retention(
    tmp_path: Path, ca: CertificateAuthority, clock: FakeClock, node_key: PrivateKey
) -> None:
    path = tmp_path / ENROLLMENT_TOKENS_FILE
    store = EnrollmentTokens(path, ca, clock=clock, retention=timedelta(days=1))
    used = await store.issue("gpu-1")
    await store.redeem(used, csr_pem(node_key))
    await store.issue("gpu-2", ttl=timedelta(hours=1))
    await clock.advance(timedelta(days=1, hours=2))

    await store.issue("gpu-3")

    assert [record["nodeName"] for record in json.loads(path.read_text())["tokens"]] == ["gpu-3"]
    with pytest.raises(UnknownEnrollmentTokenError):
        await store.redeem(used, csr_pem(node_key))


@pytest.mark.parametrize(
    ("node_name", "ttl", "field"),
    [
        ("", timedelta(hours=1), "nodeName"),
        ("bad name", timedelta(hours=1), "nodeName"),
        ("x" * 64, timedelta(hours=1), "nodeName"),
        ("gpu-1", timedelta(0), "ttl"),
    ],
)
async def test_bad_issue_arguments_name_their_field(
    store: EnrollmentTokens, node_name: str, ttl: timedelta, field: str
) -> None:
    with pytest.raises(InvalidFieldError) as refused:
        await store.issue(node_name, ttl)

    assert refused.value.field == field


async def test_an_unreadable_token_file_is_reported_with_its_path(
    store: EnrollmentTokens, tmp_path: Path
) -> None:
    (tmp_path / ENROLLMENT_TOKENS_FILE).write_text('{"version": 9, "tokens": []}')

    with pytest.raises(EnrollmentStoreError, match=ENROLLMENT_TOKENS_FILE):
        await store.issue("gpu-1")


def test_token_refusals_share_one_root() -> None:
    for refusal in (UnknownEnrollmentTokenError, EnrollmentTokenUsedError, EnrollmentTokenExpiredError):
        assert issubclass(refusal, EnrollmentTokenError)
    assert issubclass(EnrollmentTokenError, EnrollmentError)
    assert not issubclass(EnrollmentStoreError, EnrollmentTokenError)


async def test_token_file_shape(
    store: EnrollmentTokens,
    tmp_path: Path,
    clock: FakeClock,
    node_key: PrivateKey,
    snapshot_json: SnapshotAssertion,
) -> None:
    spent = await store.issue("gpu-1", ttl=timedelta(minutes=30))
    await clock.advance(timedelta(minutes=5))
    await store.redeem(spent, csr_pem(node_key))
    await store.issue("mac-studio", ttl=timedelta(days=1))

    document = json.loads((tmp_path / ENROLLMENT_TOKENS_FILE).read_text(encoding="utf-8"))

    for record in document["tokens"]:
        assert re.fullmatch(r"[0-9a-f]{64}", record["tokenSha256"])
        record["tokenSha256"] = "<sha256 of the token>"
    assert document == snapshot_json


def _sha256(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()
