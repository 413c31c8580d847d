"""A classic benchmark for real: ``mirbad up``, its agent, llama-server with the tiny GGUF, the spec's sizes.

The model is registered with its trained 256-token context in one slot (the prefill is capped by it);
the suite's sizes are the product's own (N = 1/4/8/16, 3 runs).
While the job runs, ``/v1`` refuses the model with 503 ``maintenance``; afterwards it serves again and
the result is listed with the settings the instance was launched with.
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
from mirbad_protocol import ModelDefinition
from mirbad_protocol.agent import ProcessRuntimeInfo

pytestmark = [
    pytest.mark.llamacpp,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="cleans up through /proc"),
    pytest.mark.timeout(300),
]

JOB_S = 180.0
CHAT = {"model": "tiny-chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


@pytest.fixture
def up(tmp_path: Path) -> Iterator[Up]:
    server = llama_server_path()
    assert server is not None
    first = port_block()
    process = {"port_range_start": first, "port_range_end": first + 19, "stop_timeout_s": 5}
    config = {"graceful_shutdown_s": 2, "telemetry_interval_s": 0.5, "process": process}
    with mirbad_up(tmp_path, config, llama_server=server) as started:
        yield started


def test_a_classic_benchmark_of_a_llama_server_model(up: Up) -> None:
    password = up.first_run_password(up.start())
    with (
        MirbadClient(up.base_url, password, timeout=WAIT_S) as admin,
        httpx.Client(base_url=up.base_url, timeout=WAIT_S, trust_env=False) as v1,
    ):
        [node] = admin.nodes()
        assert node.info is not None
        [llamacpp] = [r for r in node.info.runtimes if isinstance(r, ProcessRuntimeInfo)]
        [executable] = llamacpp.executables
        # The prefill is capped by the tiny model's 256-token context; the answers stop where it ends.
        definition = tiny_llama_definition(executable.model_dump(mode="json", by_alias=True))
        admin.create_model(ModelDefinition.from_wire(definition))
        admin.start("tiny")
        admin.wait_ready("tiny", timeout=WAIT_S)

        job = admin.benchmark("tiny")
        refused = []

        def ended() -> bool:
            answer = v1.post("/v1/chat/completions", json=CHAT)
            if answer.status_code == 503:
                refused.append(answer.json()["error"]["code"])
            [current] = admin.benchmark_jobs()
            return current.state != "running"

        until(ended, lambda: "the benchmark did not end", timeout_s=JOB_S, poll_s=0.2)
        [finished] = admin.benchmark_jobs()
        after = v1.post("/v1/chat/completions", json=CHAT)
        listed = admin.benchmarks("tiny")

    assert finished.id == job.id
    assert finished.state == "succeeded", finished.error
    assert "maintenance" in refused
    assert after.status_code == 200
    [result] = listed.results
    assert [level.concurrency for level in result.levels] == [1, 4, 8, 16]
    for level in result.levels:
        assert len(level.runs) == 3
        # The answers stop where the 256-token context ends: the same bodies, the same tokens.
        assert all(run.failed == 0 for run in level.runs)
        assert len({run.tokens for run in level.runs}) == 1
        assert level.runs[0].tokens > 0
        assert level.per_request_tokens_per_s > 0
    assert result.prefill is not None
    assert result.prefill.cache_source == "timings.cache_n"
    assert result.prefill.cached_tokens is not None
    assert result.prefill.cached_tokens > 0
    assert result.questions is not None
    assert result.questions.asked == 8
    assert result.config_hash
    assert "--ctx-size" in result.settings
    # Read back from the running llama-server's command line: the port is the agent's choice.
    assert "--port" in result.settings
    assert result.gpu == "skipped: the node has no GPU"
