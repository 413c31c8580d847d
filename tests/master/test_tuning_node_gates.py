"""The preset search's gates read a Hugging Face folder on its node (``GET /agent/v1/model-config``).

A real master composition on the fake agent: the agent answers the folder's ``config.json`` and its
weights' size, the master's gate reader (:class:`~mirbad_orchestration.tuning.FleetNodeFacts`, wired
in the composition) fills the gates, and the candidates are the preset simulator's, which records
every definition it was asked to measure.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from tests.master._stack import Master, running_master
from tests.master.test_api_benchmarks import QWEN, chatty, ready
from tests.master.test_api_tuning import BASE, _ended

from mirbad_orchestration.jobs import JobTarget
from mirbad_orchestration.tuning import CandidateRunner, Measurement, PresetSimulatedRunner
from mirbad_protocol import ModelDefinition
from mirbad_protocol.agent import ModelConfigInfo
from mirbad_protocol.tuning import TuningRequest

pytestmark = pytest.mark.anyio

GIB = 1024**3
# 32 layers x 8 KV heads x 128 x 2 bytes x 2 = 128 KiB a token: 8192 tokens are 1 GiB of KV at auto.
SHAPE: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "hidden_size": 4096,
    "torch_dtype": "bfloat16",
}


class Recorded:
    """The candidates' definitions, as the preset simulator was asked to measure them."""

    def __init__(self) -> None:
        self.seen: list[ModelDefinition] = []

    def truth(self, definition: ModelDefinition) -> Measurement:
        self.seen.append(definition)
        components = {"short_n16_tok_s": 400.0, "short_max_seqs_tok_s": 800.0, "single_tok_s": 50.0}
        return replace(BASE, components=components)

    async def __call__(self, target: JobTarget, saved: ModelDefinition) -> CandidateRunner:
        return PresetSimulatedRunner(self.truth, noise=0.005, seed=3)


@pytest.fixture
def recorded() -> Recorded:
    return Recorded()


@pytest.fixture
async def master(tmp_path: Path, recorded: Recorded) -> AsyncIterator[Master]:
    options = {"tuning_runners": recorded, "tuning_repetitions": (1, 2)}
    async with running_master(tmp_path, agent=chatty, services_options=options) as master:
        yield master


def folder(master: Master, path: str, config: dict[str, Any], weights_bytes: int = 16 * GIB) -> None:
    master.local.model_configs[path] = ModelConfigInfo(
        path=path, config=config, weights_bytes=weights_bytes, weights_files=4
    )


async def tuned(master: Master, body: dict[str, Any], **request: Any) -> dict[str, Any]:
    """Start a preset run of ``body`` (made Ready first) and answer its stored run."""
    await ready(master, body)
    started = await master.admin.post(
        f"/api/models/{body['id']}/tune", json={"preset": "throughput"} | request
    )
    assert started.status_code == 202, started.text
    job = await _ended(master, started.json()["id"])
    assert job["state"] == "succeeded", job
    runs = (await master.admin.get(f"/api/models/{body['id']}/tuning")).json()["runs"]
    return dict(runs[0])


def tried(run: dict[str, Any], step: str) -> list[Any]:
    return [row["changes"][step] for row in run["candidates"] if row["step"] == step]


async def test_a_folder_with_mtp_layers_gets_the_mtp_depths(master: Master) -> None:
    mtp = {"method": "mtp", "num_speculative_tokens": 1}
    folder(master, "qwen", SHAPE | {"architectures": ["Qwen3NextForCausalLM"], "mtp_num_hidden_layers": 1})
    folder(master, "plain", SHAPE)
    with_layers = await tuned(master, QWEN | {"speculative": mtp}, steps=["speculative"])
    plain = QWEN | {"id": "plain", "servedName": "plain", "modelPath": "plain", "speculative": mtp}
    without = await tuned(master, plain, steps=["speculative"])

    # The pinned vLLM registers Qwen3NextMTP: the MTP layers in config.json decide.
    assert {"mtp-2", "mtp-3", "mtp-5"} <= set(tried(with_layers, "speculative"))
    assert not [value for value in tried(without, "speculative") if str(value).startswith("mtp-")]
    assert any("no MTP layers" in note for note in without["notes"])
    assert ("GET", "/agent/v1/model-config?path=qwen") in master.local.requests


async def test_a_hybrid_config_pairs_prefix_caching_with_the_mamba_cache_mode(
    master: Master, recorded: Recorded
) -> None:
    folder(master, "qwen", SHAPE | {"hybrid_override_pattern": "M-M*-M"})
    await tuned(master, QWEN, steps=["kv_prefix"])

    pairs = {(seen.enable_prefix_caching, seen.mamba_cache_mode) for seen in recorded.seen}
    assert {(True, "align"), (False, "none")} <= pairs


async def test_a_30b_dense_model_also_tries_one_and_two_sequences(master: Master) -> None:
    folder(master, "qwen", SHAPE, weights_bytes=60 * 10**9)  # bf16: 30 B parameters
    moe = QWEN | {"id": "moe", "servedName": "moe", "modelPath": "moe"}
    folder(master, "moe", SHAPE | {"num_experts": 128}, weights_bytes=60 * 10**9)
    dense = await tuned(master, QWEN, steps=["max_num_seqs"])
    routed = await tuned(master, moe, steps=["max_num_seqs"])

    assert {1, 2} <= set(tried(dense, "max_num_seqs"))
    assert not {1, 2} & set(tried(routed, "max_num_seqs"))


async def test_the_kv_gate_is_decided_for_an_hf_folder(master: Master) -> None:
    folder(master, "fits", SHAPE, weights_bytes=4 * GIB)
    folder(master, "tight", SHAPE, weights_bytes=4 * GIB)
    fits = QWEN | {"id": "fits", "servedName": "fits", "modelPath": "fits", "memoryBudgetGiB": 6}
    tight = QWEN | {"id": "tight", "servedName": "tight", "modelPath": "tight", "memoryBudgetGiB": 4.5}
    admitted = await tuned(master, fits, steps=["kv_prefix"])
    refused = await tuned(master, tight, steps=["kv_prefix"])

    kv = {str(value).split("/")[0] for value in tried(admitted, "kv_prefix")}
    assert kv == {"fp8", "auto"}  # 6 GiB less 4 of weights holds 1 GiB of KV
    assert {str(value).split("/")[0] for value in tried(refused, "kv_prefix")} == {"fp8"}
    assert any("full-length request: no" in note for note in refused["notes"])


async def test_the_classic_kv_dimension_reads_an_hf_folder_s_shape(master: Master) -> None:
    folder(master, "fits", SHAPE, weights_bytes=4 * GIB)
    fits = QWEN | {"id": "fits", "servedName": "fits", "modelPath": "fits", "memoryBudgetGiB": 6}
    await ready(master, fits)
    plan_steps = (await master.admin.post("/api/models/fits/tune", json={"search": "full"})).json()
    await _ended(master, plan_steps["id"])

    assert plan_steps["steps"][-1] == "kv_cache_dtype"


async def test_a_node_without_the_route_leaves_the_gates_to_the_tags(master: Master) -> None:
    run = await tuned(master, QWEN | {"tags": ["hybrid"]}, steps=["kv_prefix"])  # no folder on the node

    assert any("unknown" in note for note in run["notes"])  # the KV gate could not be decided


async def test_the_drafter_s_block_size_caps_the_draft_depths(master: Master) -> None:
    folder(master, "qwen", SHAPE)
    folder(master, "drafts/small", {"architectures": ["DFlashDraftModel"], "block_size": 8})
    drafted = QWEN | {"speculative": {"model": "drafts/small", "num_speculative_tokens": 3}}
    run = await tuned(master, drafted, steps=["speculative"])

    depths = [value for value in tried(run, "speculative") if str(value).startswith("draft-")]
    assert set(depths) == {"draft-3", "draft-7"}  # 11 is over the drafter's block size 8
    assert any("over the drafter's block size 8" in note for note in run["notes"])
    assert ("GET", "/agent/v1/model-config?path=drafts%2Fsmall") in master.local.requests


async def test_the_plan_preview_reads_the_node_as_the_run_does(master: Master) -> None:
    folder(master, "qwen", SHAPE, weights_bytes=60 * 10**9)
    await ready(master, QWEN)
    saved = await master.services.models.get("qwen")
    request = TuningRequest(preset="throughput", steps=["max_num_seqs"])

    previewed = await master.services.tuning.preview("qwen", saved, request)
    tags_only = master.services.tuning.plan(saved, request)
    unknown = await master.services.tuning.preview("gone", saved, request)  # no such model: the tags

    assert previewed.dimensions[0].values[:2] == (1, 2)
    assert 1 not in tags_only.dimensions[0].values
    assert unknown.dimensions[0].values == tags_only.dimensions[0].values


async def test_a_preset_run_reads_the_model_s_folder_once(master: Master) -> None:
    folder(master, "qwen", SHAPE, weights_bytes=4 * GIB)
    fits = QWEN | {"memoryBudgetGiB": 6}
    await tuned(master, fits, steps=["kv_prefix"])

    # One read feeds both the KV gate's shape and the preset gates' inputs.
    reads = [seen for seen in master.local.requests if seen[1].startswith("/agent/v1/model-config")]
    assert reads == [("GET", "/agent/v1/model-config?path=qwen")]


async def test_a_drafter_given_as_a_hub_id_is_read_from_the_node_s_hugging_face_cache(master: Master) -> None:
    folder(master, "qwen", SHAPE)
    folder(master, "models--z-lab--drafter", {"architectures": ["DFlashDraftModel"], "block_size": 8})
    drafted = QWEN | {"speculative": {"model": "z-lab/drafter", "num_speculative_tokens": 3}}
    run = await tuned(master, drafted, steps=["speculative"])

    depths = [value for value in tried(run, "speculative") if str(value).startswith("draft-")]
    assert set(depths) == {"draft-3", "draft-7"}  # 11 is over the drafter's block size 8
    assert ("GET", "/agent/v1/model-config?path=z-lab%2Fdrafter") in master.local.requests
    assert ("GET", "/agent/v1/model-config?path=models--z-lab--drafter") in master.local.requests


async def test_a_drafter_the_node_does_not_have_keeps_the_saved_depth_and_says_why(master: Master) -> None:
    folder(master, "qwen", SHAPE)
    drafted = QWEN | {"speculative": {"model": "z-lab/missing", "num_speculative_tokens": 5}}
    run = await tuned(master, drafted, steps=["speculative"])

    depths = [value for value in tried(run, "speculative") if str(value).startswith("draft-")]
    assert depths == ["draft-5"]
    [note] = [note for note in run["notes"] if "drafter" in note]
    assert note.startswith("speculative: draft-model depths: the drafter's block size is unknown")
    assert "'z-lab/missing' is not on the node under a model root or in its Hugging Face cache" in note
