"""GET /agent/v1/model-config: a Hugging Face folder's config.json and weights' size, never out of a root."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from tests.agent.test_routes import Node, error_of, make_node

from mirbad_agent import ModelFolders
from mirbad_agent.exceptions import PathNotFoundError
from mirbad_protocol.agent import (
    MAX_MODEL_CONFIG_BYTES,
    ROUTE_MODEL_CONFIG,
    AgentErrorCode,
    ModelConfigInfo,
    agent_path,
)

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(os.name != "posix", reason="builds its fixture tree with POSIX symlinks"),
]

CONFIG = {"architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": 2, "mtp_num_hidden_layers": 1}


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    root = tmp_path / "models"
    folder = root / "org" / "model"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(CONFIG))
    (folder / "model-00001-of-00002.safetensors").write_bytes(b"x" * 300)
    (folder / "model-00002-of-00002.safetensors").write_bytes(b"x" * 200)
    (folder / "pytorch_model.bin").write_bytes(b"x" * 999)  # safetensors win: vLLM loads those
    (folder / "tokenizer.json").write_bytes(b"x" * 50)
    bins = root / "org" / "bins"
    bins.mkdir()
    (bins / "config.json").write_text("{}")
    (bins / "pytorch_model.bin").write_bytes(b"x" * 70)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "config.json").write_text("{}")
    (outside / "big.safetensors").write_bytes(b"x" * 10)
    (bins / "leak.safetensors").symlink_to(outside / "big.safetensors")  # out of the root: not counted
    (root / "escape").symlink_to(outside)
    for name, text in {
        "bad": "{not json",
        "list": "[1, 2]",
        "huge": json.dumps({"pad": "x" * MAX_MODEL_CONFIG_BYTES}),
    }.items():
        (root / name).mkdir()
        (root / name / "config.json").write_text(text)
    (root / "empty").mkdir()
    built = make_node(root)
    async with built.client, built.services:
        yield built


async def get(node: Node, path: str | None) -> httpx.Response:
    return await node.client.get("/model-config", params={} if path is None else {"path": path})


async def test_a_folder_answers_its_config_and_the_safetensors_size(node: Node) -> None:
    answer = await get(node, "org/model")
    assert answer.status_code == 200, answer.text
    info = ModelConfigInfo.from_wire(answer.json())
    assert (info.config, info.weights_bytes, info.weights_files) == (CONFIG, 500, 2)


async def test_bin_files_count_without_safetensors_and_links_out_of_the_root_do_not(node: Node) -> None:
    info = ModelConfigInfo.from_wire((await get(node, "org\\bins")).json())
    assert (info.config, info.weights_bytes, info.weights_files) == ({}, 70, 1)


@pytest.mark.parametrize("path", ["../outside", "org/../../outside", "/etc", "escape", "C:/models"])
async def test_paths_out_of_the_roots_are_refused_naming_the_field(node: Node, path: str) -> None:
    assert error_of(await get(node, path)) == (403, "path_refused", "path")


async def test_bad_configs_and_requests(node: Node) -> None:
    assert error_of(await get(node, "bad")) == (422, "config_unreadable", "path")
    assert error_of(await get(node, "list")) == (422, "config_unreadable", "path")
    huge = await get(node, "huge")
    assert error_of(huge) == (422, "config_unreadable", "path")
    assert str(MAX_MODEL_CONFIG_BYTES) in huge.json()["error"]["message"]
    assert error_of(await get(node, "empty"))[:2] == (404, "path_not_found")
    assert error_of(await get(node, "gone"))[:2] == (404, "path_not_found")
    assert error_of(await get(node, "org/model/config.json")) == (400, "invalid_request", "path")
    assert error_of(await get(node, None)) == (400, "invalid_request", "path")
    assert error_of(await get(node, "")) == (400, "invalid_request", "path")


def test_the_route_and_its_refusal_are_in_the_contract() -> None:
    assert agent_path(ROUTE_MODEL_CONFIG) == "/agent/v1/model-config"
    assert AgentErrorCode.CONFIG_UNREADABLE.http_status == 422
    # The wire keeps the config's own keys (snake_case), only the envelope's fields are camelCase.
    wire = ModelConfigInfo(path="m", config={"num_hidden_layers": 2}, weights_bytes=5).to_wire()
    assert wire == {"path": "m", "config": {"num_hidden_layers": 2}, "weightsBytes": 5}


async def test_a_hugging_face_cache_repo_answers_for_its_main_snapshot(tmp_path: Path) -> None:
    root = tmp_path / "hub"
    repo = root / "models--z-lab--drafter"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("c0ffee\n")
    (repo / "blobs").mkdir()
    (repo / "blobs" / "cfg").write_text(json.dumps({"block_size": 8}))
    (repo / "blobs" / "weights").write_bytes(b"x" * 40)
    for revision in ("c0ffee", "0ld"):
        snapshot = repo / "snapshots" / revision
        snapshot.mkdir(parents=True)
        (snapshot / "config.json").symlink_to(repo / "blobs" / "cfg")
        (snapshot / "model.safetensors").symlink_to(repo / "blobs" / "weights")
    (repo / "snapshots" / "0ld" / "extra.safetensors").write_bytes(b"x" * 5)
    stale = root / "models--z-lab--gone"
    (stale / "refs").mkdir(parents=True)
    (stale / "refs" / "main").write_text("missing")
    built = make_node(root)
    async with built.client, built.services:
        answer = await get(built, "models--z-lab--drafter")
        assert answer.status_code == 200, answer.text
        info = ModelConfigInfo.from_wire(answer.json())
        # refs/main's snapshot, not the older one beside it; the blobs it links to count.
        assert (info.config, info.weights_bytes, info.weights_files) == ({"block_size": 8}, 40, 1)
        gone = await get(built, "models--z-lab--gone")
        assert gone.status_code == 404, gone.text


async def test_the_containers_hub_cache_is_looked_in_last(tmp_path: Path) -> None:
    root, hub = tmp_path / "models", tmp_path / "cache" / "huggingface" / "hub"
    (root / "models--z-lab--drafter").mkdir(parents=True)
    (root / "models--z-lab--drafter" / "config.json").write_text('{"block_size": 4}')  # a root wins
    snapshot = hub / "models--z-lab--other" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text('{"block_size": 16}')
    (hub / "models--z-lab--other" / "refs").mkdir()
    (hub / "models--z-lab--other" / "refs" / "main").write_text("abc")
    folders = ModelFolders([root], hub_cache=hub)

    assert (await folders.model_config("models--z-lab--drafter")).config == {"block_size": 4}
    assert (await folders.model_config("models--z-lab--other")).config == {"block_size": 16}
    assert not (await folders.present(["models--z-lab--other"]))[0].present  # a launch never looks there
    with pytest.raises(PathNotFoundError):
        await ModelFolders([root]).model_config("models--z-lab--other")
