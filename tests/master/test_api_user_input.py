"""The admin API's bodies are user input: unknown fields, values beyond the limits and bad URLs are 400."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.master._stack import running_master

from mirbad_master.models.actions import user_definition
from mirbad_orchestration.registry import SEED_MODEL
from mirbad_protocol import InvalidFieldError

pytestmark = pytest.mark.anyio

MODEL: dict[str, Any] = {"id": "qwen", "servedName": "Qwen3-8B", "modelPath": "qwen/qwen3-8b"}
NODE: dict[str, Any] = {"id": "gpu-1", "name": "gpu-1", "agentUrl": "https://gpu-1.lan:9443"}


def field_of(response: httpx.Response) -> tuple[str, str]:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert error["message"].startswith(f"{error['field']}: ")
    return error["field"], error["message"]


async def test_a_misspelled_model_field_is_400_with_a_suggestion(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master:
        created = await master.admin.post("/api/models", json={**MODEL, "maxModelLenn": 4096})
        budget = await master.admin.post("/api/models", json={**MODEL, "memoryBudgetGIB": 16})
        nested = await master.admin.post("/api/models", json={**MODEL, "placement": {"nodeID": "local"}})
        await master.admin.post("/api/models", json=MODEL)
        replaced = await master.admin.put("/api/models/qwen", json={**MODEL, "maxNumSeq": 4})
        kept = await master.admin.get("/api/models/qwen")

    assert field_of(created) == ("maxModelLenn", "maxModelLenn: unknown field; did you mean `maxModelLen`?")
    assert field_of(budget)[0] == "memoryBudgetGIB"
    assert "`memoryBudgetGiB`" in field_of(budget)[1]
    assert field_of(nested)[0] == "placement.nodeID"
    assert field_of(replaced)[0] == "maxNumSeq"
    assert kept.json()["definition"]["maxNumSeqs"] == 16


async def test_values_beyond_the_limits_are_400(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master:
        huge = await master.admin.post("/api/models", json={**MODEL, "memoryBudgetGiB": 1e308})
        seqs = await master.admin.post("/api/models", json={**MODEL, "maxNumSeqs": 2**48})
        image = await master.admin.post("/api/models", json={**MODEL, "image": "not an image"})
        name = await master.admin.post("/api/models", json={**MODEL, "servedName": "a\x1b[2Jb"})

    assert [field_of(r)[0] for r in (huge, seqs, image, name)] == [
        "memoryBudgetGiB",
        "maxNumSeqs",
        "image",
        "servedName",
    ]


async def test_a_node_with_a_plain_http_agent_url_is_400(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master:
        plain = await master.admin.post("/api/nodes", json={**NODE, "agentUrl": "http://gpu-1.lan:9443"})
        path = await master.admin.post("/api/nodes", json={**NODE, "agentUrl": "https://gpu-1.lan/agent"})
        typo = await master.admin.post("/api/nodes", json={**NODE, "agentURL": NODE["agentUrl"]})
        listed = await master.admin.get("/api/nodes")

    assert field_of(plain)[0] == "agentUrl"
    assert "https" in field_of(plain)[1]
    assert field_of(path)[0] == "agentUrl"
    assert field_of(typo) == ("agentURL", "agentURL: unknown field; did you mean `agentUrl`?")
    assert [node["id"] for node in listed.json()] == ["local"]


async def test_key_token_and_settings_bodies_are_strict(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master:
        key = await master.admin.post("/api/keys", json={"name": "ci", "allowedModel": ["qwen"]})
        token = await master.admin.post("/api/nodes/enrollment-tokens", json={"nodeName": "gpu-2", "ttl": 60})
        settings = await master.admin.put("/api/keys/settings", json={"requireKey": True})
        keys = await master.admin.get("/api/keys")

    assert field_of(key)[0] == "allowedModel"
    assert "`allowedModels`" in field_of(key)[1]
    assert field_of(token)[0] == "ttl"
    assert field_of(settings)[0] == "requireKey"
    assert keys.json() == []


async def test_a_lone_surrogate_is_400_not_a_failed_write(tmp_path: Path) -> None:
    body = b'{"id": "qwen", "servedName": "q", "modelPath": "qwen", "extraArgs": ["\\udc80"]}'
    async with running_master(tmp_path) as master:
        response = await master.admin.post(
            "/api/models", content=body, headers={"content-type": "application/json"}
        )

    assert field_of(response)[0] == "extraArgs.0"


async def test_an_owned_flag_in_extra_args_is_held_to_the_same_limits(tmp_path: Path) -> None:
    # The registry lifts --max-num-seqs out of extraArgs into maxNumSeqs; the limit must follow it.
    huge = {**MODEL, "extraArgs": ["--max-num-seqs", str(2**48)]}
    async with running_master(tmp_path) as master:
        created = await master.admin.post("/api/models", json=huge)
        await master.admin.post("/api/models", json=MODEL)
        replaced = await master.admin.put("/api/models/qwen", json=huge)

    assert field_of(created) == ("maxNumSeqs", "maxNumSeqs: must be at most 65536")
    assert field_of(replaced)[0] == "maxNumSeqs"


async def test_a_vllm_value_the_pinned_vllm_refuses_is_400_naming_the_field(tmp_path: Path) -> None:
    # vLLM would refuse these at start-up (its choices, a renamed compilation key): say so at save time.
    bodies = {
        "kvCacheDtype": {**MODEL, "kvCacheDtype": "fp4"},
        "mambaCacheMode": {**MODEL, "extraArgs": ["--mamba_cache_mode=all"]},
        "compilationConfig": {**MODEL, "extraArgs": ["-cc.level=3"]},
        "extraArgs": {**MODEL, "extraArgs": ["--dtype bf16"]},
    }
    async with running_master(tmp_path) as master:
        answers = {field: await master.admin.post("/api/models", json=body) for field, body in bodies.items()}
        listed = (await master.admin.get("/api/models")).json()

    assert {field: field_of(answer)[0] for field, answer in answers.items()} == {
        field: field for field in bodies
    }
    assert "'mode'" in field_of(answers["compilationConfig"])[1]
    assert "bfloat16" in field_of(answers["extraArgs"])[1]
    assert "qwen" not in {view["definition"]["id"] for view in listed}


async def test_the_sign_in_body_is_strict_too(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master:
        typo = await master.anonymous.post("/api/session", json={"pasword": master.password})

    assert field_of(typo) == ("pasword", "pasword: unknown field; did you mean `password`?")


def test_the_portal_validates_a_definition_as_the_api_does() -> None:
    with pytest.raises(InvalidFieldError) as typo:
        user_definition({**MODEL, "maxModelLenn": 1})
    with pytest.raises(InvalidFieldError) as lifted:
        user_definition({**MODEL, "extraArgs": ["--max-num-seqs", str(2**48)]})

    assert (typo.value.field, lifted.value.field) == ("maxModelLenn", "maxNumSeqs")
    assert user_definition(MODEL).served_name == "Qwen3-8B"


async def test_a_stored_model_beyond_the_limits_still_lists_and_loads(tmp_path: Path) -> None:
    # A models.json written before the limits existed (or by hand) is read as it is.
    legacy = {**MODEL, "maxNumSeqs": 2**48, "image": "Odd/Image", "fromANewerRelease": True}
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "models.json").write_text(json.dumps({"schemaVersion": 1, "models": [legacy]}))
    async with running_master(tmp_path) as master:
        one = await master.admin.get("/api/models/qwen")

    assert one.status_code == 200, one.text
    assert one.json()["definition"]["maxNumSeqs"] == 2**48


def test_the_seed_model_passes_as_user_input() -> None:
    # The registry's first model is what people copy; it must be something they could have typed.
    assert user_definition(SEED_MODEL.to_wire()) == SEED_MODEL
