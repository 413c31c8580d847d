"""Enrollment and the node registry: a token for a taken name, registration on enroll, re-enrollment."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.orchestration.test_enrollment import START, csr_pem

from mirbad_orchestration.exceptions import DuplicateNodeError, UnknownNodeError
from mirbad_orchestration.fleet import (
    ENROLLMENT_TOKENS_FILE,
    LOCAL_NODE_ID,
    EnrollmentTokens,
    NodeRecord,
    NodeRegistry,
)
from mirbad_orchestration.testing import FakeClock
from mirbad_protocol import InvalidFieldError
from mirbad_protocol.pki import CertificateAuthority, generate_private_key, spki_pin

pytestmark = pytest.mark.anyio

GPU_1_URL = "https://10.0.0.7:9443"


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority.create("Enrollment nodes test CA")


@pytest.fixture
async def nodes(tmp_path: Path) -> NodeRegistry:
    registry = NodeRegistry(tmp_path)
    await registry.ensure_local("https://127.0.0.1:9443", "local")
    return registry


@pytest.fixture
def store(tmp_path: Path, ca: CertificateAuthority, nodes: NodeRegistry) -> EnrollmentTokens:
    return EnrollmentTokens(tmp_path / ENROLLMENT_TOKENS_FILE, ca, nodes=nodes, clock=FakeClock(START))


@pytest.mark.parametrize("name", ["local", "LOCAL", "gpu-1", "GPU-1"])
async def test_no_token_is_issued_for_a_name_a_node_has(
    store: EnrollmentTokens, nodes: NodeRegistry, name: str
) -> None:
    await nodes.add(NodeRecord(id="gpu-1", name="gpu-1", agent_url=GPU_1_URL))

    with pytest.raises(DuplicateNodeError, match="re-enroll") as refused:
        await store.issue(name)

    assert refused.value.node_id in ("local", "gpu-1")


async def test_enrolling_registers_the_node_pinned_to_its_new_key(
    store: EnrollmentTokens, nodes: NodeRegistry
) -> None:
    token = await store.issue_join_token("GPU-1", agent_url=GPU_1_URL)

    enrollment = await store.redeem(token, csr_pem(generate_private_key()))

    registered = await nodes.get("gpu-1")
    assert (registered.name, registered.agent_url, registered.expected_certificate_name) == (
        "GPU-1",
        GPU_1_URL,
        "GPU-1",
    )
    assert registered.pin_sha256 == spki_pin(enrollment.certificate)
    assert enrollment.node_id == "gpu-1"


async def test_a_token_without_an_agent_url_registers_nothing(
    store: EnrollmentTokens, nodes: NodeRegistry
) -> None:
    enrollment = await store.redeem(await store.issue("gpu-1"), csr_pem(generate_private_key()))

    assert [node.id for node in await nodes.list()] == [LOCAL_NODE_ID]
    assert enrollment.node_id is None


async def test_an_agent_url_must_be_https_without_a_path(store: EnrollmentTokens) -> None:
    with pytest.raises(InvalidFieldError) as refused:
        await store.issue("gpu-1", agent_url="http://10.0.0.7:9443")

    assert refused.value.field == "agentUrl"


async def test_re_enrolling_pins_the_new_key_so_the_old_certificate_is_refused(
    store: EnrollmentTokens, nodes: NodeRegistry
) -> None:
    first = await store.redeem(
        await store.issue("gpu-1", agent_url=GPU_1_URL), csr_pem(generate_private_key())
    )
    await nodes.update((await nodes.get("gpu-1")).model_copy(update={"labels": {"rack": "2"}}))

    second = await store.redeem(await store.issue("gpu-1", reenroll=True), csr_pem(generate_private_key()))

    record = await nodes.get("gpu-1")
    assert record.pin_sha256 == spki_pin(second.certificate)
    assert record.pin_sha256 != spki_pin(first.certificate)
    assert (record.agent_url, record.labels) == (GPU_1_URL, {"rack": "2"})  # the rest is kept


async def test_re_enrolling_an_unknown_node_is_refused(store: EnrollmentTokens) -> None:
    with pytest.raises(UnknownNodeError):
        await store.issue("gpu-9", reenroll=True)


async def test_the_local_node_is_re_enrolled_only_when_asked(
    store: EnrollmentTokens, nodes: NodeRegistry
) -> None:
    # What a fleet of one does when its agent lost its identity: the local node exists already.
    with pytest.raises(DuplicateNodeError):
        await store.issue("local")

    enrollment = await store.redeem(
        await store.issue("local", reenroll=True), csr_pem(generate_private_key())
    )

    assert enrollment.node_id == LOCAL_NODE_ID
    assert (await nodes.get(LOCAL_NODE_ID)).pin_sha256 == spki_pin(enrollment.certificate)


async def test_a_name_taken_after_the_token_was_issued_leaves_the_token_unspent(
    store: EnrollmentTokens, nodes: NodeRegistry
) -> None:
    token = await store.issue("gpu-1", agent_url=GPU_1_URL)
    await nodes.add(NodeRecord(id="gpu-1", name="gpu-1", agent_url="https://gpu-1.lan:9443"))

    with pytest.raises(DuplicateNodeError):
        await store.redeem(token, csr_pem(generate_private_key()))
    await nodes.remove("gpu-1")

    assert (await store.redeem(token, csr_pem(generate_private_key()))).node_id == "gpu-1"
