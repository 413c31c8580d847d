"""The portal's reads and actions over a real master composition and fake agents (no browser)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest
from tests.master._stack import Master, running_master

from mirbad_master.keys import actions as keys
from mirbad_master.models import actions as models
from mirbad_master.nodes import actions as nodes
from mirbad_master.nodes.page import enrollment_request, node_request
from mirbad_master.ui._attention import attention_items
from mirbad_master.ui._fleet import FleetSnapshot, fleet_snapshot, parse_tags
from mirbad_master.ui._format import pause_text
from mirbad_master.ui._refusals import PORTAL_ACTOR
from mirbad_orchestration import AgentAdmissionRefusedError
from mirbad_orchestration.supervision import RestartPause
from mirbad_protocol import InvalidFieldError, ModelDefinition, ModelState, ModelStatus
from mirbad_protocol.admin import ApiKeyCreate, ModelView

pytestmark = pytest.mark.anyio

WAIT_S = 10.0
RUNNING = ("failing", "changed")


def definition(model_id: str, *tags: str, **changes: object) -> ModelDefinition:
    return ModelDefinition.from_wire(
        {"id": model_id, "servedName": model_id, "modelPath": model_id, "tags": list(tags), **changes}
    )


async def snapshot_when(master: Master, ready: Callable[[FleetSnapshot], bool]) -> FleetSnapshot:
    """The first snapshot for which ``ready`` holds (the monitors poll every 0.2 s)."""
    with anyio.fail_after(WAIT_S):
        # The caches are filled by the master's own monitors: there is no event to wait on.
        while not ready(snapshot := await fleet_snapshot(master.services)):  # noqa: ASYNC110
            await anyio.sleep(0.05)
    return snapshot


async def audit_actions(master: Master) -> list[tuple[str, str, str]]:
    entries = await master.services.audit.read(datetime.now(UTC).date())
    return [(entry.actor, entry.action, entry.target) for entry in entries]


async def test_saving_a_model_stores_it_refreshes_the_router_names_and_audits(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master:
        stored = await models.create_model(master.services, definition("qwen", "Chat"), PORTAL_ACTOR)
        with pytest.raises(InvalidFieldError) as taken:
            await models.create_model(master.services, definition("qwen"), PORTAL_ACTOR)
        await models.update_model(master.services, definition("qwen", "chat", maxNumSeqs=8), PORTAL_ACTOR)
        saved = await master.services.models.get("qwen")
        entries = await audit_actions(master)

    assert stored.tags == ["chat"]
    assert taken.value.field == "id"
    assert saved.max_num_seqs == 8
    assert ("user:admin", "model.create", "qwen") in entries
    assert ("user:admin", "model.update", "qwen") in entries


async def test_start_stop_and_delete_go_through_the_health_monitor(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master:
        await models.create_model(master.services, definition("qwen"), PORTAL_ACTOR)
        await models.start_model(master.services, "qwen", PORTAL_ACTOR)
        running = await snapshot_when(master, lambda s: s.models[-1].running)
        listed = await master.services.recovery.running("local")
        await models.stop_model(master.services, "qwen", PORTAL_ACTOR)
        await models.start_model(master.services, "qwen", PORTAL_ACTOR)
        await models.delete_model(master.services, "qwen", PORTAL_ACTOR)
        remaining = [model.id for model in await master.services.models.list()]
        entries = await audit_actions(master)

    assert running.models[-1].id == "qwen"
    assert listed == frozenset({"qwen"})
    assert "qwen" not in remaining
    assert master.local.driver.stops == ["qwen", "qwen"]
    actions_seen = [action for actor, action, target in entries if target == "qwen" and actor == "user:admin"]
    assert actions_seen == [
        "model.create",
        "model.start",
        "model.stop",
        "model.start",
        "model.stop",
        "model.delete",
    ]


async def test_a_start_refused_for_memory_can_be_forced(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master:
        await models.create_model(master.services, definition("huge", memoryBudgetGiB=120), PORTAL_ACTOR)
        with pytest.raises(AgentAdmissionRefusedError):
            await models.start_model(master.services, "huge", PORTAL_ACTOR)
        status = await models.start_model(master.services, "huge", PORTAL_ACTOR, force=True)

    assert status.state in (ModelState.STARTING, ModelState.READY)


async def test_the_attention_list_names_pauses_failures_pending_restarts_and_lost_nodes(
    tmp_path: Path,
) -> None:
    async with running_master(tmp_path, "local", "gpu-2") as master:
        services = master.services
        for model_id in ("paused", "failing", "changed"):
            await models.create_model(services, definition(model_id), PORTAL_ACTOR)
        await services.pauses.pause(
            RestartPause(
                model_id="paused",
                node_id="local",
                crashes=3,
                last_error="Traceback\nCUDA out of memory",
                paused_at=datetime.now(UTC),
            )
        )
        await models.start_model(services, "failing", PORTAL_ACTOR)
        await models.start_model(services, "changed", PORTAL_ACTOR)
        await snapshot_when(master, lambda s: all(row.running for row in s.models if row.id in RUNNING))
        master.local.driver.set_state("failing", ModelState.FAILED, error="exit status 1")
        await models.update_model(services, definition("changed", maxNumSeqs=32), PORTAL_ACTOR)
        master.agents.down.add("gpu-2")
        snapshot = await snapshot_when(master, lambda s: len(s.attention) == 4)

    by_kind = {item.kind: item for item in snapshot.attention}
    assert (
        by_kind["paused"].text == "Automatic restarts paused for paused after 3 crashes: CUDA out of memory"
    )
    assert by_kind["failed"].text == "failing failed: exit status 1"
    assert by_kind["restart"].text == "changed: restart pending (1 changed setting)"
    assert by_kind["unreachable"].subject == "gpu-2"
    assert by_kind["unreachable"].link == "/nodes"
    paused = next(row for row in snapshot.models if row.id == "paused")
    assert paused.view.pause is not None
    assert pause_text(paused.view.pause) == "Crashed 3 times, automatic restarts paused"


async def test_the_tag_filter_keeps_models_carrying_all_selected_tags(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master:
        await models.create_model(master.services, definition("a", "alpha", "beta"), PORTAL_ACTOR)
        await models.create_model(master.services, definition("b", "alpha"), PORTAL_ACTOR)
        snapshot = await fleet_snapshot(master.services)

    assert [row.id for row in snapshot.with_tags(parse_tags("alpha,BETA"))] == ["a"]
    assert [row.id for row in snapshot.with_tags(parse_tags("alpha"))] == ["a", "b"]
    assert len(snapshot.with_tags([])) == len(snapshot.models)
    assert {"alpha", "beta"} <= set(snapshot.tags())


def test_tags_in_the_url_are_lowercased_and_deduplicated() -> None:
    assert parse_tags(" Chat,tools,,chat ") == ["chat", "tools"]
    assert parse_tags(None) == []


async def test_keys_are_created_once_and_revoked_with_an_audit_line(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master:
        created = await keys.create_key(master.services, ApiKeyCreate(name="notebook"), PORTAL_ACTOR)
        revoked = await keys.revoke_key(master.services, created.id, PORTAL_ACTOR)
        await keys.set_keys_required(master.services, False, PORTAL_ACTOR)
        required = await master.services.keys.keys_required()
        entries = await audit_actions(master)

    assert created.secret.startswith("mb-")
    assert revoked.revoked_at is not None
    assert required is False
    assert ("user:admin", "key.revoke", created.id) in entries


async def test_an_enrollment_gives_the_exact_command_to_run_on_the_node(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master:
        issued = await nodes.issue_enrollment(
            master.services, enrollment_request("gpu-7", timedelta(hours=1), "10.0.0.7"), PORTAL_ACTOR
        )
        with pytest.raises(InvalidFieldError) as refused:
            await nodes.issue_enrollment(
                master.services, enrollment_request("bad name!", timedelta(hours=1)), PORTAL_ACTOR
            )
        enroll_url = master.services.settings.enroll_url

    assert issued.token.startswith("mbj1.")
    assert issued.install_command == (
        f"mirbad-agent enroll --master {enroll_url} --token {issued.token} --name gpu-7 --san 10.0.0.7"
    )
    assert refused.value.field == "nodeName"


async def test_an_added_node_is_polled_at_once(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master:
        with pytest.raises(InvalidFieldError):
            await nodes.add_node(
                master.services, node_request("gpu-2", "gpu-2", "http://not-tls:9443"), PORTAL_ACTOR
            )
        master.agents.down.add("gpu-2")
        record, _state = await nodes.add_node(
            master.services, node_request("gpu-2", "gpu-2", "https://gpu-2.lan:9443"), PORTAL_ACTOR
        )
        state = master.services.cache.node("gpu-2")

    assert record.certificate_name == "gpu-2"
    assert state is not None
    assert state.reachable is False


@pytest.mark.parametrize(("progress", "kind"), [("Stalled", "stalled"), ("Slow", "slow")])
def test_a_ready_model_without_progress_is_on_the_attention_list_with_its_figures(
    progress: str, kind: str
) -> None:
    reason = "2 requests running, no token for 130 s"
    status = ModelStatus.model_validate(
        {"id": "chat", "servedName": "chat", "state": "Ready", "progress": progress, "progressReason": reason}
    )
    view = ModelView(definition=definition("chat"), status=status)

    [item] = attention_items([view], [])

    assert (item.kind, item.subject, item.link) == (kind, "chat", "/models?focus=chat")
    assert item.text == f"chat is {progress}: {reason}"
    assert (
        attention_items(
            [
                ModelView(
                    definition=definition("chat"),
                    status=status.model_copy(update={"progress": None, "progress_reason": None}),
                )
            ],
            [],
        )
        == []
    )
