"""The workload presets and the embeddings suite against a real llama-server serving the tiny GGUF.

Sizes are small so the tier stays quick (named in ``SMALL``): N = 1 and 2, max num seqs 3, two
repetitions, 8 output tokens, 16 for a tool call, a 32-token shared prefix; a 64K cold prompt that cannot
fit (a cold prompt that fits is covered by ``tests/master/test_api_benchmarks_presets.py`` on a stand-in
server).
The embeddings run is llama-server with ``--embeddings --pooling mean``.
"""

from __future__ import annotations

import math
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import pytest
from tests._support.asgi_server import free_port
from tests._support.real_parts import llama_server_path
from tests._support.tiny_gguf import write_tiny_gguf

from mirbad_orchestration.benchmarks import (
    WORKLOAD_PRESETS,
    ChatEndpoint,
    PresetSuite,
    check_guards,
    embedding_input_limit,
    is_pooling,
    score_run,
)
from mirbad_orchestration.exceptions import BenchmarkRequestError
from mirbad_protocol.benchmarks import PresetSizes

pytestmark = [pytest.mark.llamacpp, pytest.mark.anyio, pytest.mark.timeout(180)]

SMALL = PresetSizes(
    levels=[1, 2],
    max_seqs_cap=3,
    repetitions=2,
    short_output_tokens=[8],
    cold_prompt_tokens=[65_536],
    shared_prefix_tokens=32,
    shared_prefix_questions=2,
    question_tokens=4,
    tool_call_tokens=16,
    embedding_levels=[1, 2],
    embedding_input_words=[2, 4, 8, 16],
)
"""The sizes of this tier (the product runs the spec's: N = 1/16/max seqs, 3 repetitions, 256/1,024)."""
CONTEXT = 1024
SLOTS = 4
MAX_MODEL_LEN = 256  # the tiny model's trained context caps each slot
EMBEDDING_ARGS = ["--embeddings", "--pooling", "mean"]


@asynccontextmanager
async def llama_server(tmp_path: Path, extra: list[str]) -> AsyncIterator[ChatEndpoint]:
    binary = llama_server_path()
    assert binary is not None
    model = write_tiny_gguf(tmp_path / "tiny.gguf")
    port = free_port()
    argv = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port)]
    argv += ["-c", str(CONTEXT), "-np", str(SLOTS), "--metrics", *extra]
    with (tmp_path / "llama.log").open("wb") as log:
        process = await anyio.open_process(argv, stdout=log, stderr=subprocess.STDOUT)
        try:
            # A connection per request. In the product the suite reaches llama-server through the agent's
            # proxy, which sends a request again when llama-server closed the pooled connection it went
            # out on; here the suite talks to llama-server directly, and on a loaded machine a reused
            # connection could be one llama-server's 5 s idle timer had just closed. A loopback connect
            # lands before the first token, outside the decode speed the tests compare.
            limits = httpx.Limits(max_keepalive_connections=0)
            async with httpx.AsyncClient(trust_env=False, timeout=30, limits=limits) as client:
                base = f"http://127.0.0.1:{port}/"
                with anyio.fail_after(30):
                    while True:
                        try:
                            if (await client.get(f"{base}health")).status_code == 200:
                                break
                        except httpx.TransportError:
                            pass
                        await anyio.sleep(0.05)
                yield ChatEndpoint(base, client, served_name="tiny", timeout_s=60)
        finally:
            process.terminate()
            with anyio.fail_after(10):
                await process.wait()


async def test_the_agents_preset_runs_against_llama_server(tmp_path: Path) -> None:
    preset = WORKLOAD_PRESETS["agents"]
    async with llama_server(tmp_path, []) as endpoint:
        suite = PresetSuite(endpoint, preset, SMALL, max_model_len=MAX_MODEL_LEN, max_num_seqs=3)
        outcome = await suite.run()

    short = outcome.workloads.short_chat
    assert [(level.concurrency, level.failed) for level in short] == [(1, 0), (2, 0), (3, 0)]
    assert all(level.per_request_tokens_per_s and level.per_request_tokens_per_s > 0 for level in short)
    assert len(outcome.workloads.tool_calls) == 3 * SMALL.repetitions
    # The tiny vocabulary splits the 24 random head words into letters: no cold prompt fits 256 tokens.
    [too_long] = outcome.workloads.cold_prompts
    assert "does not fit the max model len 256" in too_long.skipped
    shared = outcome.workloads.shared_prefix
    assert shared is not None
    # llama-server has no prefix-cache counter on /metrics; its per-request cache_n is read instead.
    assert shared.cache_source == "timings.cache_n (llama-server)"
    assert shared.cache_hits is not None
    assert shared.cache_hits > 0
    assert shared.note == ""
    assert set(outcome.components) == {"short_n1_tok_s", "shared_prefix_ttft_s"}
    assert math.isclose(score_run(preset, outcome.components, outcome.components).score, 1.0)
    assert outcome.questions is not None
    assert outcome.questions.asked == 8


@pytest.mark.parametrize("name", ["interactive", "throughput", "long-documents"])
async def test_every_other_generation_preset_runs_its_workloads_against_llama_server(
    tmp_path: Path, name: str
) -> None:
    preset = WORKLOAD_PRESETS[name]
    async with llama_server(tmp_path, []) as endpoint:
        suite = PresetSuite(endpoint, preset, SMALL, max_model_len=MAX_MODEL_LEN, max_num_seqs=3)
        outcome = await suite.run()

    measured = outcome.workloads
    ran = {
        "short-chat": bool(measured.short_chat),
        "tool-calls": bool(measured.tool_calls),
        "cold-prompts": bool(measured.cold_prompts),
        "shared-prefix": measured.shared_prefix is not None,
        "questions": outcome.questions is not None,
    }
    assert {workload for workload, done in ran.items() if done} == set(preset.workloads)
    assert all(level.failed == 0 for level in measured.short_chat)
    # Every component the preset weighs that this model could measure; the score against itself is 1.
    assert set(outcome.components) <= set(preset.weights)
    if outcome.components:
        assert math.isclose(score_run(preset, outcome.components, outcome.components).score, 1.0)


async def test_the_embeddings_suite_runs_against_llama_server_with_mean_pooling(tmp_path: Path) -> None:
    preset = WORKLOAD_PRESETS["embeddings"]
    assert is_pooling(EMBEDDING_ARGS)
    async with llama_server(tmp_path, EMBEDDING_ARGS) as endpoint:
        suite = PresetSuite(endpoint, preset, SMALL, max_model_len=MAX_MODEL_LEN, max_num_seqs=3)
        outcome = await suite.run()

    embeddings = outcome.workloads.embeddings
    assert embeddings is not None
    assert embeddings.vectors_valid, embeddings.shape_detail
    assert embeddings.dimension is not None
    assert embeddings.dimension > 0
    assert embeddings.unit_length is not None
    assert [(level.concurrency, level.failed) for level in embeddings.levels] == [(1, 0), (2, 0), (3, 0)]
    for level in embeddings.levels:
        assert level.input_tokens_per_s is not None
        assert level.input_tokens_per_s > 0
        assert level.requests_per_s is not None
        assert level.latency_p50_s is not None
        assert level.latency_p95_s is not None
        assert level.latency_p50_s <= level.latency_p95_s
    assert set(outcome.components) == {"embed_n1_input_tok_s"}
    assert check_guards(preset.guards, outcome.guard_inputs, outcome.guard_inputs) == []


async def test_the_embeddings_suite_fits_the_products_inputs_to_the_slots_context(tmp_path: Path) -> None:
    # The product's inputs (up to 256 words) are far longer than a 256-token slot of the tiny model
    # holds: llama-server answered the first of them with a bare 500 (issue 24 item 2).
    sizes = SMALL.model_copy(update={"embedding_input_words": PresetSizes().embedding_input_words})
    argv = ["-c", str(CONTEXT), "-np", str(SLOTS), *EMBEDDING_ARGS]
    limit = embedding_input_limit("llamacpp", argv, MAX_MODEL_LEN)
    async with llama_server(tmp_path, EMBEDDING_ARGS) as endpoint:
        suite = PresetSuite(
            endpoint,
            WORKLOAD_PRESETS["embeddings"],
            sizes,
            max_model_len=MAX_MODEL_LEN,
            max_num_seqs=2,
            input_limit=limit,
        )
        outcome = await suite.run()

    embeddings = outcome.workloads.embeddings
    assert limit is not None
    assert limit.tokens == CONTEXT // SLOTS
    assert embeddings is not None
    assert embeddings.vectors_valid, embeddings.shape_detail
    assert [(level.concurrency, level.failed) for level in embeddings.levels] == [(1, 0), (2, 0)]
    assert embeddings.input_note.startswith("inputs of 8, 32, 96, 256 words cut to")
    assert "256 tokens per input (the context of 256 tokens per sequence)" in embeddings.input_note


async def test_an_input_limit_too_small_for_any_input_is_refused_naming_the_batch(tmp_path: Path) -> None:
    tiny_batch = ["--batch-size", "8", "--ubatch-size", "8"]
    argv = ["-c", str(CONTEXT), "-np", str(SLOTS), *EMBEDDING_ARGS, *tiny_batch]
    limit = embedding_input_limit("llamacpp", argv, MAX_MODEL_LEN)
    async with llama_server(tmp_path, [*EMBEDDING_ARGS, *tiny_batch]) as endpoint:
        suite = PresetSuite(
            endpoint,
            WORKLOAD_PRESETS["embeddings"],
            SMALL,
            max_model_len=MAX_MODEL_LEN,
            max_num_seqs=2,
            input_limit=limit,
        )
        with pytest.raises(BenchmarkRequestError) as refused:
            await suite.run()

    message = str(refused.value)
    assert message.startswith("the embeddings suite cannot fit its inputs: the model takes at most 8 tokens")
    assert "llama-server's physical batch (--ubatch-size) of 8 tokens" in message
    assert "500" not in message
