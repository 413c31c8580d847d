"""Join tokens issued by the master's token store: the CA pin in front of the one-time secret."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from mirbad_orchestration.exceptions import EnrollmentTokenUsedError, UnknownEnrollmentTokenError
from mirbad_orchestration.fleet import ENROLLMENT_TOKENS_FILE, EnrollmentTokens
from mirbad_protocol.pki import (
    CertificateAuthority,
    JoinToken,
    PrivateKey,
    certificate_request_to_pem,
    create_certificate_request,
    generate_private_key,
)

pytestmark = pytest.mark.anyio

START = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority.create("Join token test CA", now=START - timedelta(days=1))


@pytest.fixture(scope="module")
def node_key() -> PrivateKey:
    return generate_private_key()


@pytest.fixture
def store(tmp_path: Path, ca: CertificateAuthority) -> EnrollmentTokens:
    return EnrollmentTokens(tmp_path / ENROLLMENT_TOKENS_FILE, ca, clock=lambda: START)


def csr(key: PrivateKey) -> bytes:
    return certificate_request_to_pem(create_certificate_request(key, "whatever"))


async def test_a_join_token_carries_the_ca_pin_and_enrolls_once(
    store: EnrollmentTokens, ca: CertificateAuthority, node_key: PrivateKey
) -> None:
    text = await store.issue_join_token("gpu-1")

    token = JoinToken.parse(text)
    assert token.pin == ca.pin
    assert (await store.redeem(text, csr(node_key))).node_name == "gpu-1"
    with pytest.raises(EnrollmentTokenUsedError):
        await store.redeem(text, csr(node_key))


async def test_the_bare_secret_of_a_join_token_is_the_same_token(
    store: EnrollmentTokens, node_key: PrivateKey
) -> None:
    token = JoinToken.parse(await store.issue_join_token("gpu-1"))

    assert (await store.redeem(token.secret, csr(node_key))).node_name == "gpu-1"
    with pytest.raises(EnrollmentTokenUsedError):
        await store.redeem(token.encode(), csr(node_key))


async def test_only_the_secret_hash_is_stored(tmp_path: Path, store: EnrollmentTokens) -> None:
    text = await store.issue_join_token("gpu-1")

    stored = (tmp_path / ENROLLMENT_TOKENS_FILE).read_text()
    assert JoinToken.parse(text).secret not in stored
    assert len(json.loads(stored)["tokens"]) == 1


async def test_a_join_token_for_another_ca_is_unknown(store: EnrollmentTokens, node_key: PrivateKey) -> None:
    genuine = JoinToken.parse(await store.issue_join_token("gpu-1"))
    other_ca = CertificateAuthority.create("another fleet")

    with pytest.raises(UnknownEnrollmentTokenError):
        await store.redeem(JoinToken(other_ca.pin, genuine.secret).encode(), csr(node_key))
    # Refused before the secret was looked at: the genuine token still enrolls.
    assert (await store.redeem(genuine.encode(), csr(node_key))).node_name == "gpu-1"


@pytest.mark.parametrize("text", ["mbj1.", "mbj1.x.y", "mbj1." + "A" * 43 + ".short"])
async def test_a_malformed_join_token_is_unknown(
    store: EnrollmentTokens, node_key: PrivateKey, text: str
) -> None:
    with pytest.raises(UnknownEnrollmentTokenError):
        await store.redeem(text, csr(node_key))
