"""Workload preset runs over the API (schema v2): stored results, guards, overrides and refusals.

The node is the fake agent of ``test_api_benchmarks`` whose model proxy leads to the stand-in chat
server (it never calls a tool and answers every question "The answer is 42"); the preset sizes are tiny
and named here (N = 1 and 2, max num seqs 3, one repetition, 4 output tokens, a 128-token cold prompt
and one that cannot fit).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from tests._support.polling import eventually
from tests.master._stack import Master, running_master
from tests.master.test_api_benchmarks import QWEN, TINY, WAIT_S, chatty, ready

from mirbad_protocol.benchmarks import PresetSizes

pytestmark = pytest.mark.anyio

TINY_PRESETS = PresetSizes(
    levels=[1, 2],
    max_seqs_cap=3,
    repetitions=1,
    short_output_tokens=[4],
    cold_prompt_tokens=[128, 1_000_000],
    shared_prefix_tokens=64,
    shared_prefix_questions=2,
    question_tokens=4,
)
MAX_SEQS = QWEN | {"maxNumSeqs": 8}


@pytest.fixture
async def master(tmp_path: Path) -> AsyncIterator[Master]:
    options = {"benchmark_sizes": TINY, "preset_sizes": TINY_PRESETS, "drain_timeout_s": 2.0}
    async with running_master(tmp_path, "local", agent=chatty, services_options=options) as master:
        yield master


async def run_preset(master: Master, preset: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    started = await master.admin.post("/api/models/qwen/benchmark", params={"preset": preset}, json=body)
    assert started.status_code == 202, started.text
    assert started.json()["preset"] == preset
    ended = await master.services.jobs.wait(started.json()["id"], timeout_s=WAIT_S)
    assert ended.state == "succeeded", ended.error
    listed = (await master.admin.get("/api/models/qwen/benchmarks")).json()
    result: dict[str, Any] = listed["results"][0]
    return result


async def test_an_agents_run_stores_a_v2_result_with_its_workloads_components_and_guards(
    master: Master,
) -> None:
    await ready(master, MAX_SEQS)

    result = await run_preset(master, "agents")

    assert (result["schemaVersion"], result["preset"], result["repetitions"]) == (2, "agents", 1)
    workloads = result["workloads"]
    # N = 1 and 2, then max num seqs 8 capped at 3.
    assert [(lvl["outputTokens"], lvl["concurrency"]) for lvl in workloads["shortChat"]] == [
        (4, 1),
        (4, 2),
        (4, 3),
    ]
    assert all(lvl["failed"] == 0 for lvl in workloads["shortChat"])
    assert [level["concurrency"] for level in result["levels"]] == [1, 2, 3]
    assert len(workloads["toolCalls"]) == 3
    assert not any(call["valid"] for call in workloads["toolCalls"])
    [fits, too_long] = workloads["coldPrompts"]
    assert fits["tokens"] == 128
    assert fits["ttftS"] > 0
    assert too_long["ttftS"] is None
    assert "does not fit" in too_long["skipped"]
    shared = workloads["sharedPrefix"]
    assert shared["questions"] == 2
    assert shared["note"] == "(cache metrics unavailable)"
    assert set(result["components"]) == {"short_n1_tok_s", "shared_prefix_ttft_s"}
    assert result["guards"]["toolValidity"] is True
    assert "3 of 3 tool calls were invalid" in result["guardViolations"]
    assert result["questions"]["correct"] == 1


async def test_a_job_overrides_the_preset_s_guards(master: Master) -> None:
    await ready(master, QWEN)

    result = await run_preset(master, "agents", {"guards": {"toolValidity": False}})

    assert result["guards"]["toolValidity"] is False
    assert result["guards"]["shortTtftP95N1S"] == 1.0
    assert not any("tool calls" in broken for broken in result["guardViolations"])


async def test_a_throughput_run_scores_the_max_num_seqs_level(master: Master) -> None:
    await ready(master, MAX_SEQS)

    result = await run_preset(master, "throughput")

    assert set(result["components"]) == {"short_max_seqs_tok_s"}
    assert result["workloads"]["toolCalls"] == []
    assert result["workloads"]["sharedPrefix"] is None


async def test_refusals_of_the_presets(master: Master) -> None:
    assert (await master.admin.post("/api/models", json=QWEN)).status_code == 201
    reranker = QWEN | {"id": "rerank", "servedName": "bge-reranker", "tags": ["reranker"]}
    assert (await master.admin.post("/api/models", json=reranker)).status_code == 201
    embedder = QWEN | {"id": "embed", "servedName": "bge-small", "tags": ["embedding"]}
    assert (await master.admin.post("/api/models", json=embedder)).status_code == 201

    unknown = await master.admin.post("/api/models/qwen/benchmark", params={"preset": "fastest"})
    embeddings = await master.admin.post("/api/models/qwen/benchmark", params={"preset": "embeddings"})
    refused = await master.admin.post("/api/models/rerank/benchmark", params={"preset": "embeddings"})
    bad_guard = await master.admin.post(
        "/api/models/qwen/benchmark", params={"preset": "agents"}, json={"guards": {"toolValidityy": True}}
    )
    stopped = await master.admin.post("/api/models/qwen/benchmark", params={"preset": "agents"})
    classic_on_embedder = await master.admin.post("/api/models/embed/benchmark")

    assert unknown.status_code == 422
    assert unknown.json()["error"]["code"] == "unknown_preset"
    for name in ("classic", "interactive", "agents", "throughput", "long-documents", "embeddings"):
        assert name in unknown.json()["error"]["message"]
    assert embeddings.status_code == 422
    assert embeddings.json()["error"]["code"] == "preset_not_for_model"
    assert "pooling (embedding) models only" in embeddings.json()["error"]["message"]
    assert refused.status_code == 422
    assert "reranker" in refused.json()["error"]["message"]
    assert refused.json()["error"]["modelId"] == "rerank"
    assert bad_guard.status_code == 400
    assert bad_guard.json()["error"]["field"] == "guards.toolValidityy"
    assert classic_on_embedder.status_code == 422
    assert "use the embeddings preset" in classic_on_embedder.json()["error"]["message"]
    assert stopped.status_code == 409
    assert stopped.json()["error"]["code"] == "model_not_ready"
    await eventually(lambda: master.services.jobs.jobs() == [], timeout_s=WAIT_S)
