"""Both admin API clients against a real master app served by uvicorn, over fake agents.

Every test runs once with :class:`MirbadClient` and once with :class:`AsyncMirbadClient`. The master
app runs in the test's event loop (tests._support.asgi_server.serve_asgi), so the blocking client is
called from a worker thread.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import islice
from pathlib import Path
from typing import Any

import anyio.to_thread
import httpx
import pytest
from tests._support.asgi_server import free_port, serve_asgi
from tests.master._stack import Master, running_master
from tests.orchestration._fake_agent import Refusal

from mirbad_client import (
    AdminApiError,
    AdminAuthError,
    AdminConnectionError,
    AdmissionRefusedError,
    AsyncMirbadClient,
    EnrollmentTokenIssued,
    LaunchSpecRejectedError,
    LogFollowError,
    MirbadClient,
    ModelFailedError,
    ModelView,
    NodeExistsError,
    NodeOfflineError,
    NodeRefusedError,
    NodeSummary,
    NodeTimedOutError,
    NoSuchApiKeyError,
    NoSuchModelError,
    NoSuchNodeError,
    ServedNameTakenError,
    SettingChangeView,
    StartBlockedError,
    StatusReport,
)
from mirbad_master._app import create_master_app
from mirbad_orchestration.fleet import ENROLLMENT_TOKENS_FILE
from mirbad_protocol import InvalidFieldError, ModelDefinition, ModelState, WireModel
from mirbad_protocol.admin import ApiKeyCreate
from mirbad_protocol.agent import AgentErrorCode

pytestmark = pytest.mark.anyio

QWEN = ModelDefinition.from_wire(
    {
        "id": "qwen",
        "servedName": "Qwen3-8B",
        "modelPath": "qwen/qwen3-8b",
        "memoryBudgetGiB": 16,
        "tags": ["chat", "tools"],
    }
)
GEMMA = ModelDefinition.from_wire(
    {"id": "gemma", "servedName": "gemma-3", "modelPath": "gemma", "tags": ["chat"]}
)


@pytest.fixture(params=["sync", "async"])
def kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


@dataclass
class Admin:
    """One client, called by method name; the blocking one runs in a worker thread."""

    client: MirbadClient | AsyncMirbadClient

    async def __call__(self, name: str, *args: Any, **kwargs: Any) -> Any:
        method = getattr(self.client, name)
        if isinstance(self.client, MirbadClient):
            return await anyio.to_thread.run_sync(functools.partial(method, *args, **kwargs))
        return await method(*args, **kwargs)

    async def follow(self, model_id: str, count: int | None = None, **options: Any) -> list[str]:
        """Up to ``count`` lines of the followed log (all of it when None), then close the stream."""
        if isinstance(self.client, MirbadClient):
            lines = self.client.follow_logs(model_id, **options)
            return await anyio.to_thread.run_sync(lambda: list(islice(lines, count)))
        seen: list[str] = []
        async with aclosing(self.client.follow_logs(model_id, **options)) as stream:
            async for line in stream:
                seen.append(line)
                if len(seen) == count:
                    break
        return seen


@asynccontextmanager
async def client_of(kind: str, url: str, password: str, **options: Any) -> AsyncIterator[Admin]:
    options = {"timeout": 10.0, "action_timeout": 10.0, **options}
    if kind == "sync":
        with MirbadClient(url, password, **options) as blocking:
            yield Admin(blocking)
    else:
        async with AsyncMirbadClient(url, password, **options) as client:
            yield Admin(client)


@asynccontextmanager
async def connected(
    tmp_path: Path, kind: str, *node_ids: str, **options: Any
) -> AsyncIterator[tuple[Master, Admin, str]]:
    """A master over fake agents, served on loopback, and a client of ``kind`` signed in to it."""
    async with (
        running_master(tmp_path, *node_ids) as master,
        serve_asgi(create_master_app(master.services, master.auth)) as url,
        client_of(kind, url, master.password, **options) as admin,
    ):
        yield master, admin, url


def raw_json(model: WireModel) -> Any:
    return model.model_dump(mode="json", by_alias=True)


# ---------------------------------------------------------------- the two clients are twins


def test_both_clients_have_the_same_methods() -> None:
    def public(cls: type) -> dict[str, list[str]]:
        return {
            name: list(inspect.signature(member).parameters)
            for name, member in inspect.getmembers(cls, inspect.isfunction)
            if not name.startswith("_") and name not in ("close", "aclose")
        }

    assert public(MirbadClient) == public(AsyncMirbadClient)
    assert {"models", "start", "follow_logs", "key_usage", "enrollment_token"} <= set(public(MirbadClient))


# ---------------------------------------------------------------- models


async def test_models_are_created_listed_filtered_updated_and_deleted(tmp_path: Path, kind: str) -> None:
    async with connected(tmp_path, kind) as (_, admin, _url):
        created = await admin("create_model", QWEN)
        await admin("create_model", GEMMA)
        listed = await admin("models")
        both_tags = await admin("models", tags=["chat", "tools"])
        one = await admin("model", "qwen")
        updated = await admin("update_model", QWEN.model_copy(update={"max_num_seqs": 32}))
        await admin("delete_model", "qwen")
        with pytest.raises(NoSuchModelError) as gone:
            await admin("model", "qwen")

    assert isinstance(created, ModelView)
    assert created.definition.served_name == "Qwen3-8B"
    assert created.status.state is ModelState.STOPPED
    assert [view.definition.id for view in listed][-2:] == ["qwen", "gemma"]
    assert "gemma" not in [view.definition.id for view in both_tags]
    assert one == created
    assert updated.definition.max_num_seqs == 32
    assert gone.value.model_id == "qwen"


async def test_registry_refusals_raise_the_libraries_exceptions(tmp_path: Path, kind: str) -> None:
    async with connected(tmp_path, kind) as (_, admin, _url):
        await admin("create_model", QWEN)
        with pytest.raises(AdminApiError) as exists:
            await admin("create_model", QWEN)
        with pytest.raises(ServedNameTakenError) as taken:
            await admin("create_model", GEMMA.model_copy(update={"served_name": "qwen3-8b"}))
        with pytest.raises(NoSuchModelError) as unknown_update:
            await admin("update_model", GEMMA)
        with pytest.raises(NoSuchModelError):
            await admin("delete_model", "nope")

    assert (exists.value.status_code, exists.value.code, exists.value.field) == (409, "model_exists", "id")
    assert (taken.value.served_name, taken.value.owner_id, taken.value.field) == (
        "qwen3-8b",
        "qwen",
        "servedName",
    )
    assert isinstance(taken.value, InvalidFieldError)
    assert unknown_update.value.model_id == "gemma"


async def test_start_change_restart_and_stop(tmp_path: Path, kind: str) -> None:
    async with connected(tmp_path, kind) as (master, admin, _url):
        await admin("create_model", QWEN)
        started = await admin("start", "qwen")
        changed = await admin("update_model", QWEN.model_copy(update={"max_num_seqs": 32}))
        restarted = await admin("restart", "qwen")
        stopped = await admin("stop", "qwen")

    assert started.status.state is ModelState.READY
    assert started.status.node_id == "local"
    assert changed.restart_pending is True
    assert changed.changed_settings == [
        SettingChangeView(field="maxNumSeqs", old=16, new=32, needs_restart=True)
    ]
    assert (restarted.restart_pending, restarted.changed_settings) == (False, [])
    assert stopped.status.state is ModelState.STOPPED
    assert [spec.model_id for spec in master.local.driver.starts] == ["qwen", "qwen"]


async def test_memory_refusal_then_force(tmp_path: Path, kind: str) -> None:
    async with connected(tmp_path, kind) as (_, admin, _url):
        await admin("create_model", QWEN.model_copy(update={"memory_budget_gib": 110}))  # 96 GiB free
        with pytest.raises(AdmissionRefusedError) as refused:
            await admin("start", "qwen")
        forced = await admin("start", "qwen", force=True)

    assert (refused.value.node_id, refused.value.status_code, refused.value.code) == (
        "local",
        409,
        "admission_refused",
    )
    assert str(refused.value).startswith("node 'local': the model needs 110")
    assert forced.status.state is ModelState.READY


@pytest.mark.parametrize(
    ("refusal", "raised"),
    [
        (AgentErrorCode.SPEC_REJECTED, LaunchSpecRejectedError),
        (AgentErrorCode.START_CONFLICT, StartBlockedError),
        (AgentErrorCode.INTERNAL_ERROR, NodeRefusedError),
    ],
)
async def test_agent_refusals_come_back_as_node_exceptions(
    tmp_path: Path, kind: str, refusal: AgentErrorCode, raised: type[NodeRefusedError]
) -> None:
    async with connected(tmp_path, kind) as (master, admin, _url):
        await admin("create_model", QWEN)
        master.local.refusals["start"] = Refusal(refusal.http_status, refusal, message="no, says the node")
        master.local.refusals["restart"] = master.local.refusals["start"]
        with pytest.raises(NodeRefusedError) as started:
            await admin("start", "qwen")
        with pytest.raises(NodeRefusedError) as restarted:
            await admin("restart", "qwen")

    for error in (started.value, restarted.value):
        assert type(error) is raised
        assert error.node_id == "local"
        assert error.message == "no, says the node"


async def test_node_trouble_is_unreachable_or_timeout(tmp_path: Path, kind: str) -> None:
    async with connected(tmp_path, kind) as (master, admin, _url):
        await admin("create_model", QWEN)
        master.agents.down.add("local")
        with pytest.raises(NodeOfflineError) as unreachable:
            await admin("start", "qwen")
        master.agents.down.clear()
        master.agents.slow.add("local")
        with pytest.raises(NodeTimedOutError) as timed_out:
            await admin("start", "qwen")

    assert unreachable.value.node_id == "local"
    assert "unreachable" in str(unreachable.value)
    assert timed_out.value.node_id == "local"


async def test_wait_ready_returns_ready_and_raises_on_failure_or_timeout(tmp_path: Path, kind: str) -> None:
    async with connected(tmp_path, kind) as (master, admin, _url):
        master.local.driver.start_state = ModelState.STARTING
        await admin("create_model", QWEN)
        await admin("create_model", GEMMA)
        assert (await admin("start", "qwen")).status.state is ModelState.STARTING
        master.local.driver.set_state("qwen", ModelState.READY)
        ready = await admin("wait_ready", "qwen", timeout=30, interval=0.05)
        await admin("start", "gemma")
        with pytest.raises(TimeoutError, match="still Starting"):
            await admin("wait_ready", "gemma", timeout=0.2, interval=0.05)
        master.local.driver.set_state("gemma", ModelState.FAILED, error="exit 1")
        with pytest.raises(ModelFailedError) as failed:
            await admin("wait_ready", "gemma", timeout=30, interval=0.05)

    assert ready.status.state is ModelState.READY
    assert (failed.value.model_id, failed.value.state, failed.value.error) == ("gemma", "Failed", "exit 1")


# ---------------------------------------------------------------- logs


async def test_logs_read_the_tail_of_a_running_model(tmp_path: Path, kind: str) -> None:
    async with connected(tmp_path, kind) as (master, admin, _url):
        await admin("create_model", QWEN)
        await admin("start", "qwen")
        master.local.driver.add_log("qwen", "line one", "line two", "line three")
        tail = await admin("logs", "qwen", tail=2)
        nothing = await admin("logs", "qwen", tail=0)

    assert tail == ["line two", "line three"]
    assert nothing == []


async def test_logs_of_a_running_model_shorter_than_the_tail_end_at_once(tmp_path: Path, kind: str) -> None:
    async with connected(tmp_path, kind, timeout=2.0) as (master, admin, _url):
        await admin("create_model", QWEN)
        await admin("start", "qwen")
        master.local.driver.add_log("qwen", "only line")
        tail = await admin("logs", "qwen", tail=50)

    assert tail[-1] == "only line"


async def test_follow_logs_yields_until_the_model_exits(tmp_path: Path, kind: str) -> None:
    async with connected(tmp_path, kind) as (master, admin, _url):
        await admin("create_model", QWEN)
        await admin("start", "qwen")
        master.local.driver.add_log("qwen", "one", "two", "three")
        first_two = await admin.follow("qwen", 2, tail=3)  # breaks out of a running model's log
        master.local.driver.set_state("qwen", ModelState.FAILED, error="exit 1")
        everything = await admin.follow("qwen", tail=2)  # ends by itself: the model exited

    assert first_two == ["one", "two"]
    assert everything == ["two", "three"]


async def test_log_refusals(tmp_path: Path, kind: str) -> None:
    async with connected(tmp_path, kind) as (master, admin, _url):
        await admin("create_model", QWEN)
        with pytest.raises(NoSuchModelError) as no_instance:
            await admin.follow("qwen", tail=5)
        await admin("start", "qwen")
        with pytest.raises(InvalidFieldError) as too_long:
            await admin("logs", "qwen", tail=1_000_000)
        master.local.log_error = "the log file vanished"
        master.local.driver.set_state("qwen", ModelState.FAILED)
        with pytest.raises(LogFollowError) as broken:
            await admin.follow("qwen")

    assert no_instance.value.model_id == "qwen"
    assert too_long.value.field == "tail"
    assert broken.value.node_id == "local"
    assert "the log file vanished" in str(broken.value)


# ---------------------------------------------------------------- fleet


async def test_status_reports_the_fleet(tmp_path: Path, kind: str) -> None:
    async with connected(tmp_path, kind) as (_, admin, _url):
        await admin("create_model", QWEN)
        await admin("start", "qwen")
        report = await admin("status")

    assert isinstance(report, StatusReport)
    assert [node.id for node in report.nodes] == ["local"]
    assert report.nodes[0].memory is not None
    assert report.nodes[0].memory.total_gib == 128.0
    assert {status.id: status.state for status in report.models}["qwen"] is ModelState.READY
    assert report.maintenance is None


async def test_nodes_tokens_adding_and_removing(tmp_path: Path, kind: str) -> None:
    async with connected(tmp_path, kind, "local", "gpu-1") as (_, admin, _url):
        listed = await admin("nodes")
        issued = await admin("enrollment_token", "gpu-2", timedelta(minutes=5), address="10.0.0.7")
        with pytest.raises(InvalidFieldError) as bad_name:
            await admin("enrollment_token", "no way")
        with pytest.raises(InvalidFieldError) as bad_ttl:
            await admin("enrollment_token", "gpu-2", 1)
        with pytest.raises(AdminApiError) as local:
            await admin("remove_node", "local")
        await admin("remove_node", "gpu-1")
        with pytest.raises(NoSuchNodeError) as unknown:
            await admin("node", "gpu-1")
        added = await admin("add_node", "gpu-1", "https://gpu-1.lan:9443", labels={"rack": "a"})
        with pytest.raises(NodeExistsError) as duplicate:
            await admin("add_node", "gpu-1", "https://gpu-1.lan:9443")
        one = await admin("node", "gpu-1")

    assert [(node.id, node.local, node.reachable) for node in listed] == [
        ("gpu-1", False, True),
        ("local", True, True),
    ]
    assert isinstance(issued, EnrollmentTokenIssued)
    assert issued.node_name == "gpu-2"
    assert issued.expires_at - datetime.now(UTC) <= timedelta(minutes=5)
    assert issued.install_command.endswith(f"--token {issued.token} --name gpu-2 --san 10.0.0.7")
    assert issued.token not in repr(issued)
    assert (bad_name.value.field, bad_ttl.value.field) == ("nodeName", "ttlSeconds")
    assert (local.value.status_code, local.value.code) == (409, "local_node")
    assert unknown.value.node_id == "gpu-1"
    assert (added.id, added.labels, added.reachable) == ("gpu-1", {"rack": "a"}, True)
    assert duplicate.value.node_id == "gpu-1"
    assert one == added.model_copy(update={"polled_at": one.polled_at, "last_seen": one.last_seen})


async def test_an_enrollment_token_names_where_the_agent_answers_or_re_enrolls(
    tmp_path: Path, kind: str
) -> None:
    async with connected(tmp_path, kind, "local", "gpu-1") as (master, admin, _url):
        await admin("enrollment_token", "gpu-2", agent_url="https://gpu-2.lan:9444")
        with pytest.raises(InvalidFieldError) as bad_url:
            await admin("enrollment_token", "gpu-3", agent_url="http://gpu-3.lan:9443")
        with pytest.raises(NodeExistsError) as taken:
            await admin("enrollment_token", "gpu-1")
        again = await admin("enrollment_token", "gpu-1", reenroll=True)
        stored = json.loads((master.services.settings.data_dir / ENROLLMENT_TOKENS_FILE).read_text())

    # The node is registered where its token says once it enrolls: the master's own record of it.
    urls = {token["nodeName"]: token.get("agentUrl") for token in stored["tokens"]}
    assert urls == {"gpu-2": "https://gpu-2.lan:9444", "gpu-1": None}
    assert bad_url.value.field == "agentUrl"
    assert taken.value.node_id == "gpu-1"
    assert again.node_name == "gpu-1"


# ---------------------------------------------------------------- keys


async def test_keys_are_created_once_listed_revoked_and_deleted(tmp_path: Path, kind: str) -> None:
    async with connected(tmp_path, kind) as (_, admin, _url):
        created = await admin("create_key", ApiKeyCreate(name="laptop", allowed_models=("Qwen3-8B",)))
        listed = await admin("keys")
        one = await admin("key", created.id)
        usage = await admin("key_usage")
        usage_of_one = await admin("key_usage", created.id)
        revoked = await admin("revoke_key", created.id)
        await admin("delete_key", created.id)
        with pytest.raises(NoSuchApiKeyError) as unknown:
            await admin("revoke_key", created.id)
        with pytest.raises(NoSuchApiKeyError):
            await admin("key", "nope")

    assert created.secret.startswith("mb-")
    assert created.secret not in repr(created)
    assert [info.id for info in listed] == [created.id]
    assert one.allowed_models == ("Qwen3-8B",)
    assert usage == usage_of_one == []
    assert revoked.revoked_at is not None
    assert unknown.value.key_id == created.id


# ---------------------------------------------------------------- sign-in and connection


async def test_a_wrong_password_is_an_auth_error_then_a_lockout(tmp_path: Path, kind: str) -> None:
    async with connected(tmp_path, kind) as (_, _admin, url), client_of(kind, url, "wrong") as intruder:
        refusals = []
        for _ in range(6):
            with pytest.raises(AdminAuthError) as refused:
                await intruder("models")
            refusals.append(refused.value)

    assert [(error.status_code, error.retry_after_s) for error in refusals[:5]] == [(401, None)] * 5
    assert refusals[5].status_code == 429
    assert refusals[5].retry_after_s is not None
    assert 1 <= refusals[5].retry_after_s <= 60


async def test_a_master_that_is_not_there_is_a_connection_error(kind: str) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    async with client_of(kind, url, "secret") as admin:
        with pytest.raises(AdminConnectionError) as failed:
            await admin("status")

    assert failed.value.base_url == url
    assert url in str(failed.value)


# ---------------------------------------------------------------- the views are the API's own


async def test_views_read_every_field_the_api_sends(tmp_path: Path) -> None:
    async with connected(tmp_path, "async") as (master, admin, url):
        await admin("create_model", QWEN)
        await admin("start", "qwen")
        headers = {"Authorization": f"Bearer {master.password}"}
        async with httpx.AsyncClient(base_url=url, headers=headers) as raw:
            model = (await raw.get("/api/models/qwen")).json()
            nodes = (await raw.get("/api/nodes")).json()
            status = (await raw.get("/api/status")).json()
            token = (await raw.post("/api/nodes/enrollment-tokens", json={"nodeName": "gpu-2"})).json()

    assert raw_json(ModelView.from_wire(model)) == model
    assert [raw_json(NodeSummary.from_wire(node)) for node in nodes] == nodes
    assert raw_json(StatusReport.from_wire(status)) == status
    assert raw_json(EnrollmentTokenIssued.from_wire(token)) == token
