"""A tuning run for real: ``mirbad up``, its agent, llama-server candidates as tuning instances.

The product's runner end to end: the model's own instance stops, each candidate runs under
``tiny-tuning`` with the tuning label through the real agent (mutual TLS, its proxy), the classic suite
at tiny sizes (``MIRBAD_BENCHMARK_SIZES``) once per candidate and twice in the confirmation stage
(``MIRBAD_TUNING_REPETITIONS``), then the model comes back with its saved settings. Lean on purpose:
the flash-attention step only (two candidates).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests._support.mirbad_up import WAIT_S, Up, mirbad_up, port_block
from tests._support.polling import until
from tests._support.real_parts import llama_server_path
from tests._support.tiny_definition import tiny_llama_definition

from mirbad_client import MirbadClient
from mirbad_protocol import ModelDefinition, ModelState
from mirbad_protocol.agent import ProcessRuntimeInfo
from mirbad_protocol.benchmarks import BenchmarkSizes

pytestmark = [
    pytest.mark.llamacpp,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="cleans up through /proc"),
    pytest.mark.timeout(300),
]

RUN_S = 180.0
SIZES = BenchmarkSizes(levels=[1, 2], runs=1, max_tokens=8, prefill_tokens=64, question_tokens=4)
CHAT = {"model": "tiny-chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


@pytest.fixture
def up(tmp_path: Path) -> Iterator[Up]:
    server = llama_server_path()
    assert server is not None
    first = port_block()
    process = {"port_range_start": first, "port_range_end": first + 19, "stop_timeout_s": 5}
    config = {"graceful_shutdown_s": 2, "telemetry_interval_s": 0.5, "process": process}
    env = {"MIRBAD_BENCHMARK_SIZES": SIZES.model_dump_json(by_alias=True), "MIRBAD_TUNING_REPETITIONS": "1,2"}
    with mirbad_up(tmp_path, config, llama_server=server, env=env) as started:
        yield started


def test_a_llama_server_model_is_tuned_through_its_agent(up: Up) -> None:
    password = up.first_run_password(up.start())
    with (
        MirbadClient(up.base_url, password, timeout=WAIT_S) as admin,
        httpx.Client(base_url=up.base_url, timeout=WAIT_S, trust_env=False) as v1,
    ):
        [node] = admin.nodes()
        assert node.info is not None
        [llamacpp] = [r for r in node.info.runtimes if isinstance(r, ProcessRuntimeInfo)]
        [executable] = llamacpp.executables
        definition = tiny_llama_definition(executable.model_dump(mode="json", by_alias=True))
        admin.create_model(ModelDefinition.from_wire(definition))
        admin.start("tiny")
        admin.wait_ready("tiny", timeout=WAIT_S)
        models_file = up.data_dir / "models.json"
        before = models_file.read_bytes()

        job = admin.tune("tiny", steps=["flash_attn"])

        def ended() -> bool:
            [current] = admin.tuning_jobs()
            return current.state != "running"

        until(ended, lambda: "the tuning run did not end", timeout_s=RUN_S, poll_s=0.5)
        [finished] = admin.tuning_jobs()
        [run] = admin.tuning_runs("tiny").runs
        admin.wait_ready("tiny", timeout=WAIT_S)
        after = v1.post("/v1/chat/completions", json=CHAT)
        status = admin.model("tiny").status

    assert finished.id == job.id
    assert finished.state == "succeeded", finished.error
    [baseline, *candidates] = run.candidates
    assert baseline.outcome == "accepted", baseline.error
    assert baseline.scores
    assert [row.changes for row in candidates] == [{"flash_attn": "on"}, {"flash_attn": "off"}]
    assert all(row.outcome != "failed" for row in candidates), [row.error for row in candidates]
    assert run.winner is not None
    assert not [note for note in run.notes if "did not come back" in note]
    assert status.state is ModelState.READY
    assert not status.restart_pending
    assert after.status_code == 200
    assert models_file.read_bytes() == before
