"""A real llama-server, launched the way the agent launches it, serving the tiny generated model.

The argv is exactly what the master's builder writes plus the agent's plumbing (``--host``,
``--port``), the per-instance key travels in ``LLAMA_API_KEY`` and the working directory is the model
root, so the relative ``modelPath`` resolves. The server must come up, expose ``llamacpp:`` metrics,
give every slot ``maxModelLen`` tokens, answer with the key and refuse without it, and stop on SIGTERM.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from syrupy.assertion import SnapshotAssertion
from tests._support.asgi_server import free_port
from tests._support.real_parts import llama_server_path
from tests._support.tiny_gguf import TINY, TINY_MODEL_PATH

from mirbad_orchestration.commandline import build_llamacpp_args, estimate_llamacpp_definition_gib
from mirbad_protocol import ExecutableRef, ModelDefinition
from mirbad_runtime import read_gguf_info

pytestmark = pytest.mark.llamacpp

API_KEY = "instance-secret"
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0

DEFINITION = ModelDefinition(
    id="tiny",
    served_name="tiny-chat",
    runtime="llamacpp",
    executable=ExecutableRef(name="llama-server", version="bundled"),
    model_path=TINY_MODEL_PATH,
    max_model_len=TINY.context,
    max_num_seqs=2,
    max_num_batched_tokens=256,
    # A quantized cache needs head widths divisible by 32; the tiny model's heads are 16 wide.
    kv_cache_dtype="bf16",
    gpu_layers=0,
)


def _agent_environment() -> dict[str, str]:
    # The agent passes no LLAMA_ARG_* of its own environment: they would change the settings.
    env = {name: value for name, value in os.environ.items() if not name.startswith("LLAMA_ARG_")}
    return env | {"LLAMA_API_KEY": API_KEY}


def _wait_until_healthy(process: subprocess.Popen[bytes], client: httpx.Client, log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"llama-server exited with {process.returncode}:\n{log.read_text(errors='replace')}")
        try:
            if client.get("/health").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    pytest.fail(
        f"llama-server was not healthy within {READY_TIMEOUT_S} s:\n{log.read_text(errors='replace')}"
    )


@pytest.fixture
def server(model_root: Path, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], httpx.Client]]:
    """Start llama-server as the agent would and stop it, killing it if SIGTERM is not enough."""
    binary = llama_server_path()
    assert binary is not None  # the llamacpp marker skips (or fails) the test without it
    port = free_port()
    argv = [str(binary), *build_llamacpp_args(DEFINITION), "--host", "127.0.0.1", "--port", str(port)]
    log = tmp_path / "llama-server.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            argv, cwd=model_root, env=_agent_environment(), stdout=output, stderr=subprocess.STDOUT
        )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10.0) as client:
            _wait_until_healthy(process, client, log)
            yield process, client
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT_S)


def test_the_argv_it_runs_is_the_golden_one(snapshot_json: SnapshotAssertion) -> None:
    assert build_llamacpp_args(DEFINITION) == snapshot_json


def test_llama_server_serves_the_definition(server: tuple[subprocess.Popen[bytes], httpx.Client]) -> None:
    process, client = server
    keyed = {"Authorization": f"Bearer {API_KEY}"}
    chat = {"model": "tiny-chat", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}

    metrics = client.get("/metrics", headers=keyed)
    assert metrics.status_code == 200
    assert "llamacpp:" in metrics.text

    props = client.get("/props", headers=keyed).json()
    assert props["total_slots"] == DEFINITION.max_num_seqs
    assert props["default_generation_settings"]["n_ctx"] == DEFINITION.max_model_len  # per slot

    models = client.get("/v1/models", headers=keyed).json()
    assert [model["id"] for model in models["data"]] == ["tiny-chat"]

    answer = client.post("/v1/chat/completions", headers=keyed, json=chat)
    assert answer.status_code == 200
    assert answer.json()["usage"]["completion_tokens"] == 8
    assert answer.json()["choices"][0]["message"]["content"]

    assert client.post("/v1/chat/completions", json=chat).status_code == 401
    assert (
        client.post("/v1/chat/completions", headers={"Authorization": "Bearer wrong"}, json=chat).status_code
        == 401
    )

    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=STOP_TIMEOUT_S) is not None


def test_the_estimate_of_the_generated_model_is_sane(tiny_gguf: Path) -> None:
    info = read_gguf_info(tiny_gguf)
    estimate = estimate_llamacpp_definition_gib(DEFINITION, info)
    weights_gib = tiny_gguf.stat().st_size / 1024**3
    # 2 layers x 512 cells x (4 x 16 + 4 x 16) bf16 elements = 256 KiB of KV cache, as llama.cpp logs it.
    kv_gib = 2 * 512 * 2 * 4 * 16 * 2 / 1024**3
    assert weights_gib + kv_gib < estimate < 0.5
