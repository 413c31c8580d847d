"""The admin API over a real master composition and fake agents: every route, every error code."""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route
from tests.master._stack import Master, running_master
from tests.orchestration._fake_agent import Refusal

from mirbad_master._app import create_master_app
from mirbad_orchestration.supervision import RestartPause
from mirbad_protocol import ModelState
from mirbad_protocol.agent import AgentErrorCode

pytestmark = pytest.mark.anyio

QWEN: dict[str, Any] = {
    "id": "qwen",
    "servedName": "Qwen3-8B",
    "modelPath": "qwen/qwen3-8b",
    "memoryBudgetGiB": 16,
    "tags": ["chat", "tools"],
}
GEMMA: dict[str, Any] = {"id": "gemma", "servedName": "gemma-3", "modelPath": "gemma", "tags": ["chat"]}


def error_of(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == code, error
    assert error["message"]
    return error


async def create(master: Master, body: dict[str, Any]) -> dict[str, Any]:
    response = await master.admin.post("/api/models", json=body)
    assert response.status_code == 201, response.text
    view: dict[str, Any] = response.json()
    return view


# ---------------------------------------------------------------- sign-in


async def test_api_needs_the_administrator(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master:
        missing = await master.anonymous.get("/api/models")
        wrong = await master.anonymous.get("/api/models", headers={"Authorization": "Bearer nope"})
        right = await master.admin.get("/api/models")

    error_of(missing, 401, "unauthorized")
    assert missing.headers["www-authenticate"].startswith("Bearer")
    error_of(wrong, 401, "unauthorized")
    assert right.status_code == 200


async def test_the_sixth_wrong_password_in_a_minute_is_refused(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master:
        bad = {"Authorization": "Bearer wrong"}
        first = [await master.anonymous.get("/api/status", headers=bad) for _ in range(5)]
        sixth = await master.anonymous.get("/api/status", headers=bad)
        even_right = await master.admin.get("/api/status")
        login = await master.anonymous.post("/api/session", json={"password": master.password})

    assert [response.status_code for response in first] == [401] * 5
    error_of(sixth, 429, "too_many_attempts")
    assert 1 <= int(sixth.headers["retry-after"]) <= 60
    error_of(even_right, 429, "too_many_attempts")
    error_of(login, 429, "too_many_attempts")


async def test_concurrent_calls_with_the_right_password_all_pass(tmp_path: Path) -> None:
    # Issue 31 item 5: every Bearer call counted as a strike until checked, so 20 at once got 15 x 429.
    async with running_master(tmp_path) as master, anyio.create_task_group() as group:
        statuses: list[int] = []

        async def call() -> None:
            statuses.append((await master.admin.get("/api/status")).status_code)

        for _ in range(20):
            group.start_soon(call)
    assert statuses == [200] * 20


async def test_a_live_session_is_not_locked_out_by_guesses_from_its_address(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master:
        await master.anonymous.post("/api/session", json={"password": master.password})
        session = master.anonymous.cookies["mirbad_session"]
        master.anonymous.cookies.clear()  # someone else at the same address guesses
        bad = {"Authorization": "Bearer wrong"}
        guesses = [await master.anonymous.get("/api/status", headers=bad) for _ in range(6)]
        stranger = await master.anonymous.post("/api/session", json={"password": master.password})
        master.anonymous.cookies.set("mirbad_session", session)
        again = await master.anonymous.post("/api/session", json={"password": master.password})
        scripted = await master.anonymous.get(
            "/api/status", headers={"Authorization": f"Bearer {master.password}"}
        )

    assert [guess.status_code for guess in guesses] == [401] * 5 + [429]
    assert again.status_code == 204
    assert scripted.status_code == 200
    error_of(stranger, 429, "too_many_attempts")


async def test_a_portal_session_opens_the_api_until_signed_out(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master:
        wrong = await master.anonymous.post("/api/session", json={"password": "nope"})
        signed_in = await master.anonymous.post("/api/session", json={"password": master.password})
        cookie = signed_in.headers["set-cookie"]
        with_session = await master.anonymous.get("/api/models")
        signed_out = await master.anonymous.delete("/api/session")
        after = await master.anonymous.get("/api/models")

    error_of(wrong, 401, "unauthorized")
    assert signed_in.status_code == 204
    assert cookie.startswith("mirbad_session=")
    assert "HttpOnly" in cookie
    assert "samesite=strict" in cookie.lower()
    assert with_session.status_code == 200
    assert signed_out.status_code == 204
    error_of(after, 401, "unauthorized")


async def test_health_openapi_and_landing_need_no_sign_in(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master:
        health = await master.anonymous.get("/healthz")
        schema = await master.anonymous.get("/openapi.json")
        landing = await master.anonymous.get("/")
        unknown = await master.admin.get("/api/nothing-here")

    assert health.json() == {"status": "ok"}
    paths = schema.json()["paths"]
    for path in (
        "/api/models",
        "/api/models/{model_id}",
        "/api/models/{model_id}/start",
        "/api/models/{model_id}/stop",
        "/api/models/{model_id}/restart",
        "/api/models/{model_id}/logs",
        "/api/status",
        "/api/nodes",
        "/api/nodes/enrollment-tokens",
        "/api/nodes/{node_id}",
        "/api/keys",
        "/api/keys/{key_id}/revoke",
        "/api/keys/usage",
        "/api/session",
    ):
        assert path in paths, path
    assert set(paths["/api/models/{model_id}"]) == {"get", "put", "delete"}
    assert not any(path.startswith("/v1") for path in paths)
    assert "/v1" in landing.text
    error_of(unknown, 404, "route_not_found")


# ---------------------------------------------------------------- the registry


async def test_models_are_created_listed_filtered_and_deleted(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master:
        created = await master.admin.post("/api/models", json=QWEN)
        await create(master, GEMMA)
        listed = await master.admin.get("/api/models")
        both_tags = await master.admin.get("/api/models", params=[("tag", "chat"), ("tag", "tools")])
        one = await master.admin.get("/api/models/qwen")
        deleted = await master.admin.delete("/api/models/qwen")
        gone = await master.admin.get("/api/models/qwen")
        audit = [entry.action for entry in await master.services.audit.read(_today())]

    assert created.headers["location"] == "/api/models/qwen"
    view = created.json()
    assert view["definition"]["servedName"] == "Qwen3-8B"
    assert view["definition"]["maxNumSeqs"] == 16  # views carry every field
    assert view["status"]["state"] == "Stopped"
    assert (view["restartPending"], view["changedSettings"], view["pause"]) == (False, [], None)
    ids = [item["definition"]["id"] for item in listed.json()]
    assert ids[-2:] == ["qwen", "gemma"]  # after the seed example
    assert [item["definition"]["id"] for item in both_tags.json()] == ["ornith-9b-fp8", "qwen"]  # not gemma
    assert one.json() == view
    assert deleted.status_code == 204
    error_of(gone, 404, "model_not_found")
    assert audit[:2] == ["model.create", "model.create"]
    assert "model.delete" in audit


async def test_registry_refusals_name_the_field(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master:
        await create(master, QWEN)
        again = await master.admin.post("/api/models", json=QWEN)
        taken_name = await master.admin.post("/api/models", json={**GEMMA, "servedName": "qwen3-8b"})
        bad_budget = await master.admin.post("/api/models", json={**GEMMA, "memoryBudgetGiB": -1})
        bad_tag = await master.admin.post("/api/models", json={**GEMMA, "tags": ["ok", "no way!"]})
        not_json = await master.admin.post(
            "/api/models", content=b"{", headers={"content-type": "application/json"}
        )
        mismatch = await master.admin.put("/api/models/qwen", json={**QWEN, "id": "other"})
        unknown_put = await master.admin.put("/api/models/nope", json={**QWEN, "id": "nope"})
        unknown_get = await master.admin.get("/api/models/nope")
        unknown_delete = await master.admin.delete("/api/models/nope")

    assert error_of(again, 409, "model_exists")["field"] == "id"
    assert error_of(taken_name, 409, "served_name_taken")["field"] == "servedName"
    assert error_of(bad_budget, 400, "invalid_request")["field"] == "memoryBudgetGiB"
    assert error_of(bad_tag, 400, "invalid_request")["field"] == "tags[1]"
    assert error_of(not_json, 400, "invalid_request")["field"] == "(document)"
    assert error_of(mismatch, 400, "invalid_request")["field"] == "id"
    error_of(unknown_put, 404, "model_not_found")
    error_of(unknown_get, 404, "model_not_found")
    error_of(unknown_delete, 404, "model_not_found")


# ---------------------------------------------------------------- starts, stops, restarts


async def test_start_change_restart_and_stop(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master:
        await create(master, QWEN)
        started = await master.admin.post("/api/models/qwen/start")
        changed = await master.admin.put("/api/models/qwen", json={**QWEN, "maxNumSeqs": 32})
        restarted = await master.admin.post("/api/models/qwen/restart")
        stopped = await master.admin.post("/api/models/qwen/stop")
        listed = await master.services.recovery.running("local")

    assert started.status_code == 200, started.text
    assert started.json()["status"]["state"] == "Ready"
    assert started.json()["status"]["nodeId"] == "local"
    view = changed.json()
    assert view["restartPending"] is True
    assert view["status"]["restartPending"] is True
    assert [(c["field"], c["old"], c["new"], c["needsRestart"]) for c in view["changedSettings"]] == [
        ("maxNumSeqs", 16, 32, True)
    ]
    assert restarted.json()["restartPending"] is False
    assert restarted.json()["changedSettings"] == []
    assert stopped.json()["status"]["state"] == "Stopped"
    assert listed == frozenset()
    assert [spec.model_id for spec in master.local.driver.starts] == ["qwen", "qwen"]


async def test_memory_refusal_is_409_and_force_overrides_it(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master:
        await create(master, {**QWEN, "memoryBudgetGiB": 110})  # 96 GiB are free
        refused = await master.admin.post("/api/models/qwen/start")
        forced = await master.admin.post("/api/models/qwen/start", params={"force": "true"})
        bad_flag = await master.admin.post("/api/models/qwen/start", params={"force": "maybe"})

    error_of(refused, 409, "admission_refused")
    assert forced.json()["status"]["state"] == "Ready"
    assert error_of(bad_flag, 400, "invalid_request")["field"] == "force"


@pytest.mark.parametrize(
    ("refusal", "status", "code"),
    [
        (AgentErrorCode.SPEC_REJECTED, 422, "spec_rejected"),
        (AgentErrorCode.START_CONFLICT, 409, "start_conflict"),
        (AgentErrorCode.INTERNAL_ERROR, 502, "node_refused"),
    ],
)
async def test_agent_refusals_map_to_their_status(
    tmp_path: Path, refusal: AgentErrorCode, status: int, code: str
) -> None:
    async with running_master(tmp_path) as master:
        await create(master, QWEN)
        master.local.refusals["start"] = Refusal(refusal.http_status, refusal)
        answer = await master.admin.post("/api/models/qwen/start")

    error_of(answer, status, code)


async def test_node_trouble_is_503_or_504(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master:
        await create(master, QWEN)
        master.agents.down.add("local")
        unreachable = await master.admin.post("/api/models/qwen/start")
        master.agents.down.clear()
        master.agents.slow.add("local")
        timed_out = await master.admin.post("/api/models/qwen/start")
        master.agents.slow.clear()
        listed = await master.services.recovery.running("local")

    error_of(unreachable, 503, "node_unreachable")
    error_of(timed_out, 504, "node_timeout")
    assert listed == frozenset()  # a failed start is not listed as running


async def test_a_start_by_hand_lifts_a_restart_pause(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master:
        await create(master, QWEN)
        pause = RestartPause(
            model_id="qwen", node_id="local", crashes=3, last_error="boom", paused_at=datetime.now(UTC)
        )
        await master.services.pauses.pause(pause)
        paused = await master.admin.get("/api/models/qwen")
        await master.admin.post("/api/models/qwen/start")
        lifted = await master.admin.get("/api/models/qwen")

    assert paused.json()["pause"]["crashes"] == 3
    assert paused.json()["pause"]["lastError"] == "boom"
    assert lifted.json()["pause"] is None


async def test_delete_stops_the_model_first(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master:
        await create(master, QWEN)
        await master.admin.post("/api/models/qwen/start")
        master.agents.down.add("local")
        refused = await master.admin.delete("/api/models/qwen")
        master.agents.down.clear()
        still_there = await master.admin.get("/api/models/qwen")
        deleted = await master.admin.delete("/api/models/qwen")

    error_of(refused, 503, "node_unreachable")
    assert still_there.status_code == 200
    assert deleted.status_code == 204
    assert master.local.driver.stops == ["qwen"]


# ---------------------------------------------------------------- logs


async def test_logs_stream_the_tail_then_follow_until_the_model_exits(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master:
        await create(master, QWEN)
        await master.admin.post("/api/models/qwen/start")
        master.local.driver.add_log("qwen", "line one", "line two", "line three")
        master.local.driver.set_state("qwen", ModelState.FAILED, error="exit 1")
        answer = await master.admin.get("/api/models/qwen/logs", params={"tail": 2})
        too_many = await master.admin.get("/api/models/qwen/logs", params={"tail": 1_000_000})
        not_running = await master.admin.get("/api/models/seedless/logs")

    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/event-stream")
    assert answer.text == "data: line two\n\ndata: line three\n\nevent: end\ndata: exited\n\n"
    assert error_of(too_many, 400, "invalid_request")["field"] == "tail"
    error_of(not_running, 404, "model_not_found")


async def test_logs_of_a_model_without_an_instance_are_404(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master:
        await create(master, QWEN)
        answer = await master.admin.get("/api/models/qwen/logs")

    error_of(answer, 404, "model_not_found")


# ---------------------------------------------------------------- status and nodes


async def test_status_reports_nodes_models_and_router(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master:
        await create(master, QWEN)
        await master.admin.post("/api/models/qwen/start")
        report = (await master.admin.get("/api/status")).json()

    assert [node["id"] for node in report["nodes"]] == ["local"]
    assert report["nodes"][0]["reachable"] is True
    assert report["nodes"][0]["memory"]["totalGiB"] == 128.0
    states = {model["id"]: model["state"] for model in report["models"]}
    assert states["qwen"] == "Ready"
    assert report["maintenance"] is None
    assert report["router"] == []


async def test_nodes_tokens_and_removal(tmp_path: Path) -> None:
    async with running_master(tmp_path, "local", "gpu-1") as master:
        listed = await master.admin.get("/api/nodes")
        issued = await master.admin.post(
            "/api/nodes/enrollment-tokens", json={"nodeName": "gpu-2", "address": "10.0.0.7"}
        )
        bad_name = await master.admin.post("/api/nodes/enrollment-tokens", json={"nodeName": "no way"})
        bad_ttl = await master.admin.post(
            "/api/nodes/enrollment-tokens", json={"nodeName": "gpu-2", "ttlSeconds": 1}
        )
        with_port = await master.admin.post(
            "/api/nodes/enrollment-tokens", json={"nodeName": "gpu-2", "address": "127.0.0.1:18445"}
        )
        v6 = await master.admin.post(
            "/api/nodes/enrollment-tokens", json={"nodeName": "gpu-3", "address": "fd00::7"}
        )
        local = await master.admin.delete("/api/nodes/local")
        removed = await master.admin.delete("/api/nodes/gpu-1")
        unknown = await master.admin.delete("/api/nodes/gpu-1")
        added = await master.admin.post(
            "/api/nodes", json={"id": "gpu-1", "name": "gpu-1", "agentUrl": "https://gpu-1.lan:9443"}
        )
        duplicate = await master.admin.post(
            "/api/nodes", json={"id": "gpu-1", "name": "gpu-1", "agentUrl": "https://gpu-1.lan:9443"}
        )
        one = await master.admin.get("/api/nodes/gpu-1")

    nodes = listed.json()
    assert [(node["id"], node["local"], node["reachable"]) for node in nodes] == [
        ("gpu-1", False, True),
        ("local", True, True),
    ]
    assert nodes[1]["info"]["nodeName"] == "local"
    token = issued.json()
    assert issued.status_code == 201
    assert token["token"].startswith("mbj1.")
    enroll_url = master.services.settings.enroll_url
    assert token["installCommand"] == (
        f"mirbad-agent enroll --master {enroll_url} --token {token['token']} --name gpu-2 --san 10.0.0.7"
    )
    assert error_of(bad_name, 400, "invalid_request")["field"] == "nodeName"
    assert error_of(bad_ttl, 400, "invalid_request")["field"] == "ttlSeconds"
    assert error_of(with_port, 400, "invalid_request")["field"] == "address"
    assert v6.status_code == 201
    assert v6.json()["installCommand"].endswith("--san fd00::7")
    error_of(local, 409, "local_node")
    assert removed.status_code == 204
    error_of(unknown, 404, "node_not_found")
    assert added.status_code == 201
    assert added.json()["reachable"] is True
    error_of(duplicate, 409, "node_exists")
    assert one.json()["id"] == "gpu-1"


# ---------------------------------------------------------------- keys


async def test_keys_are_created_once_listed_revoked_and_deleted(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master:
        open_before = await master.admin.get("/api/keys/settings")
        created = await master.admin.post("/api/keys", json={"name": "laptop", "allowedModels": ["Qwen3-8B"]})
        key_id = created.json()["id"]
        listed = await master.admin.get("/api/keys")
        required = await master.admin.get("/api/keys/settings")
        usage = await master.admin.get("/api/keys/usage")
        revoked = await master.admin.post(f"/api/keys/{key_id}/revoke")
        one = await master.admin.get(f"/api/keys/{key_id}")
        deleted = await master.admin.delete(f"/api/keys/{key_id}")
        unknown = await master.admin.post(f"/api/keys/{key_id}/revoke")
        bad = await master.admin.post("/api/keys", json={"name": ""})
        opened = await master.admin.put("/api/keys/settings", json={"requireKeys": False})

    assert open_before.json() == {"requireKeys": False}
    assert created.status_code == 201
    assert created.json()["secret"].startswith("mb-")
    assert "secret" not in listed.json()[0]
    assert listed.json()[0]["allowedModels"] == ["Qwen3-8B"]
    assert required.json() == {"requireKeys": True}
    assert usage.json() == []
    assert revoked.json()["revokedAt"] is not None
    assert one.json()["revokedAt"] == revoked.json()["revokedAt"]
    assert deleted.status_code == 204
    error_of(unknown, 404, "key_not_found")
    assert error_of(bad, 400, "invalid_request")["field"] == "name"
    assert opened.json() == {"requireKeys": False}


# ---------------------------------------------------------------- /v1 on the same app


async def test_v1_is_mounted_with_keys_and_maintenance(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master:
        await create(master, QWEN)
        await master.admin.post("/api/models/qwen/start")
        open_list = await master.anonymous.get("/v1/models")
        secret = (await master.admin.post("/api/keys", json={"name": "ci"})).json()["secret"]
        keyless = await master.anonymous.get("/v1/models")
        keyed = await master.anonymous.get("/v1/models", headers={"Authorization": f"Bearer {secret}"})
        unknown = await master.anonymous.post(
            "/v1/chat/completions",
            json={"model": "nope", "messages": []},
            headers={"Authorization": f"Bearer {secret}"},
        )
        await master.services.maintenance.enter("benchmark of qwen", 120, ["qwen"])
        in_maintenance = await master.anonymous.get("/v1/models")
        api_still = await master.admin.get("/api/status")
        await master.services.maintenance.leave()

    assert [model["id"] for model in open_list.json()["data"]] == ["Qwen3-8B"]
    assert keyless.status_code == 401
    assert keyless.json()["error"]["type"] == "invalid_request_error"
    assert [model["id"] for model in keyed.json()["data"]] == ["Qwen3-8B"]
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "model_not_found"
    assert in_maintenance.status_code == 503
    assert in_maintenance.json()["error"]["code"] == "maintenance"
    assert in_maintenance.headers["retry-after"] == "120"
    assert api_still.json()["maintenance"] == {"message": "benchmark of qwen", "retryAfterS": 120}


def _today() -> date:
    return datetime.now(UTC).date()


def _catch_all_portal(app: FastAPI, services: object, auth: object) -> None:
    """The portal's shape that matters here: a catch-all mount at ``/`` answering HTML 404s."""

    async def not_found(request: Request) -> Response:
        return HTMLResponse("<!doctype html><p>not found</p>", status_code=404)

    app.mount("/", Starlette(routes=[Route("/{path:path}", not_found, methods=["GET"])]))


async def test_a_method_no_api_route_takes_is_405_in_the_envelope_not_the_portals_page(
    tmp_path: Path,
) -> None:
    # Issue 31 item 18: TRACE only half matches /api/models, so routing went on to the portal's
    # catch-all and the answer was its HTML 404.
    async with running_master(tmp_path) as master:
        app = create_master_app(master.services, master.auth, ui=_catch_all_portal)
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {master.password}"}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://master", headers=headers
        ) as client:
            trace = await client.request("TRACE", "/api/models")
            options = await client.request("OPTIONS", "/api/models/qwen")
            unknown = await client.get("/api/nothing-here")
            page = await client.get("/models")

    for refused, allowed in ((trace, "GET, POST"), (options, "DELETE, GET, PUT")):
        error_of(refused, 405, "method_not_allowed")
        assert refused.headers["content-type"] == "application/json"
        assert refused.headers["allow"] == allowed
    error_of(unknown, 404, "route_not_found")
    assert page.status_code == 404
    assert page.headers["content-type"].startswith("text/html")  # the portal keeps its own paths
