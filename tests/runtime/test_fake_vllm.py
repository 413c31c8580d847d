"""The stdlib-only fake vLLM the container tests run: its flags and its HTTP endpoints, without Docker."""

from __future__ import annotations

import base64
import json
import os
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.fakes import fake_vllm

FAKE = Path(fake_vllm.__file__)
BUILDER_ARGV = [
    "--model", "/models/org/model", "--served-model-name", "tiny", "--quantization", "fp8",
    "--kv-cache-dtype", "fp8", "--max-model-len", "32k", "--max-num-seqs", "8",
    "--max-num-batched-tokens", "8192", "--gpu-memory-utilization", "0.2500",
    "--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3",
    "--no-enable-prefix-caching", "--speculative-config", '{"method":"mtp","num_speculative_tokens":2}',
    "-cc", '{"cudagraph_mode":"PIECEWISE"}', "--async-scheduling", "--mamba-cache-mode", "align",
    "--disable-access-log-for-endpoints", "/health,/metrics",
]  # fmt: skip


def _wait_for_line(log: Path, needle: str, process: subprocess.Popen[bytes], timeout_s: float = 20) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines():
            if needle in line:
                return line
        if process.poll() is not None:
            raise AssertionError(f"the fake exited with {process.returncode}: {log.read_text()}")
        time.sleep(0.05)
    raise AssertionError(f"no line with {needle!r} within {timeout_s} s: {log.read_text()}")


@pytest.fixture(scope="module")
def fake_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The fake serving ``tiny`` on a port the OS picked, with the builder's flags."""
    log = tmp_path_factory.mktemp("fake") / "fake.log"
    with log.open("wb") as sink:
        argv = [sys.executable, str(FAKE), *BUILDER_ARGV, "--host", "127.0.0.1", "--port", "0"]
        process = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT)
    try:
        line = _wait_for_line(log, fake_vllm.START_LINE, process)
        yield line.rsplit(" ", 1)[1] + "/"
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture
def client(fake_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=fake_url, timeout=10, trust_env=False) as http:
        yield http


def test_every_builder_flag_parses_with_vllm_semantics() -> None:
    args = fake_vllm.parse_args(BUILDER_ARGV)

    assert args.served_names == ["tiny"]
    assert args.max_model_len == 32_000  # vLLM: k is decimal, K binary
    assert args.enable_prefix_caching is False
    assert args.async_scheduling is True
    assert args.speculative_config == {"method": "mtp", "num_speculative_tokens": 2}
    assert args.compilation_config == {"cudagraph_mode": "PIECEWISE"}
    assert args.quiet_paths == {"/health", "/metrics"}
    assert args.port == 8000


@pytest.mark.parametrize(
    "argv",
    [
        ["--model", "m", "--no-such-flag", "1"],
        ["--model", "m", "--max-num"],  # no abbreviations, like vLLM
        ["--model", "m", "--compilation-config", "{not json"],
        ["--model", "m", "--enable-auto-tool-choice"],
        ["--model", "m", "--gpu-memory-utilization", "1.5"],
    ],
)
def test_bad_command_lines_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        fake_vllm.parse_args(argv)

    assert exited.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_fail_switch_exits_1_after_logging_the_reason() -> None:
    env = {**os.environ, "FAKE_VLLM_FAIL": "CUDA out of memory"}
    done = subprocess.run(
        [sys.executable, str(FAKE), "--model", "m"], env=env, capture_output=True, text=True, timeout=30
    )

    assert done.returncode == 1
    assert done.stderr.strip().endswith("ERROR fake-vllm: CUDA out of memory")
    assert f"step {fake_vllm.FAILURE_PREAMBLE_LINES}/" in done.stderr


def test_health_and_models(client: httpx.Client) -> None:
    assert client.get("health").status_code == 200
    models = client.get("v1/models").json()

    assert [model["id"] for model in models["data"]] == ["tiny"]
    assert models["data"][0]["root"] == "/models/org/model"


def test_chat_completion_echoes_and_counts_tokens(client: httpx.Client) -> None:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 3}
    reply = client.post("v1/chat/completions", json=body).json()

    assert reply["object"] == "chat.completion"
    assert reply["choices"][0]["message"]["content"] == "fake reply: hello"
    assert reply["choices"][0]["finish_reason"] == "length"
    assert reply["usage"] == {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}


def test_chat_stream_ends_with_a_usage_chunk_and_done(client: httpx.Client) -> None:
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "one two"}]}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with client.stream("POST", "v1/chat/completions", json=body) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [line.removeprefix("data: ") for line in response.iter_lines() if line.startswith("data: ")]

    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    text = "".join(chunk["choices"][0]["delta"].get("content", "") for chunk in chunks if chunk["choices"])
    assert text == "fake reply: one two"
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 4


def test_completions_json_and_stream(client: httpx.Client) -> None:
    whole = client.post("v1/completions", json={"model": "tiny", "prompt": "say hi"}).json()
    with client.stream(
        "POST", "v1/completions", json={"model": "tiny", "prompt": "x", "stream": True}
    ) as reply:
        lines = [line for line in reply.iter_lines() if line.startswith("data: ")]

    assert whole["choices"][0]["text"] == "fake reply: say hi"
    assert lines[-1] == "data: [DONE]"
    assert json.loads(lines[0].removeprefix("data: "))["object"] == "text_completion"


def test_embeddings_are_deterministic_in_float_and_base64(client: httpx.Client) -> None:
    floats = client.post("v1/embeddings", json={"model": "tiny", "input": ["a b", "c"]}).json()
    packed = client.post(
        "v1/embeddings", json={"model": "tiny", "input": "a b", "encoding_format": "base64"}
    ).json()

    vector = floats["data"][0]["embedding"]
    decoded = struct.unpack(f"<{len(vector)}f", base64.b64decode(packed["data"][0]["embedding"]))
    assert len(floats["data"]) == 2
    assert decoded == pytest.approx(vector, rel=1e-6)
    assert floats["usage"]["prompt_tokens"] == 3


def test_metrics_expose_the_vllm_series(client: httpx.Client) -> None:
    before = _metric(client, "vllm:generation_tokens_total")
    client.post("v1/chat/completions", json={"model": "tiny", "messages": [{"role": "user", "content": "x"}]})

    assert _metric(client, "vllm:generation_tokens_total") == before + 3
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
        assert _metric(client, name) == 0.0
    assert _metric(client, "vllm:prompt_tokens_total") > 0


def test_unknown_model_is_a_404_in_the_openai_shape(client: httpx.Client) -> None:
    reply = client.post(
        "v1/chat/completions", json={"model": "nope", "messages": [{"role": "user", "content": "x"}]}
    )

    assert reply.status_code == 404
    assert reply.json()["error"]["type"] == "NotFoundError"


def _metric(client: httpx.Client, name: str) -> float:
    for line in client.get("metrics").text.splitlines():
        if line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} is missing from /metrics")
