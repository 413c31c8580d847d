"""The container driver end to end on the real vLLM CPU image, through ``mirbad up``'s master and agent.

One scenario with one started vLLM (a start costs a minute on these CPUs, so the tier shares it): the
builder's argv and labels on the real container, Starting → Ready by /health, telemetry from the real
/metrics, chat (streamed and not) and completions with the ``openai`` client through master and agent,
the load generator's tokens against vLLM's own counter, the classic suite and every workload preset
through the master, a pending restart (the container's label against the saved definition) whose
"old → new" list is read back from the container's Cmd, adoption after the agent is
killed with SIGKILL, the same pending restart and list after the master itself is killed and started
again, stop and removal, the same weights served as an embedding model
(vLLM's pooling runner), and a start vLLM refuses reported Failed with vLLM's own line.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import docker
import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam
from tests._support.mirbad_up import Admin, Up
from tests._support.polling import until
from tests._support.real_parts import CHROMIUM, CHROMIUM_ARGS
from tests._support.vllm_image import MODEL_NAME, ensure_model
from tests._support.vllm_up import TINY_PRESET, vllm_up

from mirbad_orchestration.benchmarks import ChatEndpoint, measure_run
from mirbad_protocol.benchmarks import BenchmarkSizes
from mirbad_runtime import MODEL_LABEL

pytestmark = [
    pytest.mark.long(minutes=4),
    pytest.mark.vllm,
    pytest.mark.docker,
    pytest.mark.browser,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the agent's pid file"),
    pytest.mark.timeout(1500),
]

START_S = 600.0
"""vLLM's start on two shared cores: ~35 s alone, several minutes while other tests load the CPUs."""
WAIT_S = 120.0
DOCS_SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
HIDDEN_SIZE = 128
"""The tiny model's width (tests/_support/vllm_tiny_model.py): the length of its embeddings."""
TINY_CLASSIC = BenchmarkSizes(levels=[1, 2], runs=1, max_tokens=4, prefill_tokens=64, question_tokens=4)


@pytest.fixture
def up(tmp_path: Path, run_id: str) -> Iterator[Up]:
    """``mirbad up`` with the tiny HF model in its model root and a network of this run's own."""
    shutil.copytree(ensure_model(), tmp_path / "data" / "models" / MODEL_NAME)
    env = {
        "MIRBAD_TELEMETRY_INTERVAL_S": "1",
        "MIRBAD_BENCHMARK_SIZES": TINY_CLASSIC.model_dump_json(by_alias=True),
        "MIRBAD_PRESET_SIZES": TINY_PRESET.model_dump_json(by_alias=True),
    }
    with vllm_up(tmp_path, run_id, settings={"telemetry_interval_s": 1}, env=env) as started:
        yield started


def _state(admin: Admin, model_id: str) -> dict[str, Any]:
    status: dict[str, Any] = admin.view(model_id)["status"]
    return status


def _wait_state(
    admin: Admin, up: Up, model_id: str, state: str, timeout_s: float = START_S
) -> dict[str, Any]:
    seen: list[dict[str, Any]] = []

    def reached() -> bool:
        seen.append(_state(admin, model_id))
        return bool(seen[-1]["state"] == state)

    until(reached, lambda: f"{model_id} never became {state}: {seen[-1:]}\n{up.log()}", timeout_s=timeout_s)
    return seen[-1]


def _photograph(up: Up, password: str, model_id: str, folder: Path) -> None:
    """The portal shows the real vLLM model Ready (Models) with live metrics (Overview); both photographed."""
    from playwright.sync_api import expect, sync_playwright

    folder.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=list(CHROMIUM_ARGS))
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.set_default_timeout(WAIT_S * 1000)
            page.goto(f"{up.base_url}/models")
            page.get_by_test_id("password").fill(password)
            page.get_by_test_id("sign-in").click()
            expect(page.get_by_test_id(f"state-{model_id}")).to_have_text("Ready")
            # The card's live line, from the agent's scrape of vLLM's own /metrics.
            expect(page.get_by_test_id(f"metrics-{model_id}")).to_contain_text("running 0")
            expect(page.get_by_test_id(f"metrics-{model_id}")).to_contain_text("KV cache")
            page.screenshot(path=str(folder / "models-vllm.png"), full_page=True)
            page.goto(up.base_url)
            row = page.get_by_test_id("overview-models").locator("tr", has_text=model_id)
            expect(row).to_contain_text("Ready")
            # Running and Waiting read "—" until the agent has scraped the model's /metrics.
            # Model, State, Node, Memory, GPU memory, Running: the sixth cell.
            expect(row.locator("td").nth(5)).to_have_text("0")
            page.screenshot(path=str(folder / "overview-vllm.png"), full_page=True)
        finally:
            browser.close()


def _container(client: Any, model_id: str) -> Any:
    [found] = client.containers.list(all=True, filters={"label": f"{MODEL_LABEL}={model_id}"})
    return found


def _agent_pid(data_dir: Path) -> int | None:
    """The agent's pid; None between a killed agent and its successor, when there is no (whole) file."""
    try:
        return int((data_dir / "agent" / "agent.pid").read_text())
    except (FileNotFoundError, ValueError):
        return None


def _generated_total(port: int) -> float:
    """vLLM's own ``vllm:generation_tokens_total``, read from the container's /metrics (no key needed)."""
    page = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=WAIT_S, trust_env=False).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in page.splitlines()
        if line.startswith("vllm:generation_tokens_total")
    )


def _benchmark(admin: Admin, model_id: str, preset: str) -> dict[str, Any]:
    job_id = admin.ok("POST", f"/api/models/{model_id}/benchmark", params={"preset": preset})["id"]
    seen: list[dict[str, Any]] = []

    def ended() -> bool:
        seen[:] = [job for job in admin.ok("GET", "/api/benchmark")["jobs"] if job["id"] == job_id]
        return bool(seen) and seen[0]["state"] != "running"

    until(ended, lambda: f"the {preset} benchmark did not end: {seen}", timeout_s=START_S)
    assert seen[0]["state"] == "succeeded", f"{seen[0].get('error')}: {seen[0]}"
    newest: dict[str, Any] = admin.ok("GET", f"/api/models/{model_id}/benchmarks")["results"][0]
    return newest


def _benchmarks_count_what_vllm_counts(up: Up, admin: Admin, model_id: str, secret: str, port: int) -> None:
    """The load generator's tokens equal vLLM's counter; the classic suite and a preset run on vLLM."""

    async def one_run() -> int:
        async with httpx.AsyncClient(trust_env=False, timeout=WAIT_S) as client:
            endpoint = ChatEndpoint(
                f"{up.base_url}/", client, "tiny-vllm", headers={"Authorization": f"Bearer {secret}"}
            )
            body = {"messages": [{"role": "user", "content": "count"}], "max_tokens": 5, "min_tokens": 5}
            measured, _ = await measure_run(endpoint, [body, body, body])
            return measured.tokens

    before = _generated_total(port)
    tokens = anyio.run(one_run)
    assert tokens == 15
    # vLLM's stat logger counts at its next engine step: the counter catches up, it never overshoots.
    until(
        lambda: _generated_total(port) - before >= tokens,
        lambda: "vLLM never counted the run",
        timeout_s=WAIT_S,
    )
    assert _generated_total(port) - before == tokens

    classic = _benchmark(admin, model_id, "classic")
    assert [level["concurrency"] for level in classic["levels"]] == [1, 2]
    assert all(run["failed"] == 0 for level in classic["levels"] for run in level["runs"])
    assert classic["configHash"]
    preset = _benchmark(admin, model_id, "agents")
    assert preset["schemaVersion"] == 2
    shared = preset["workloads"]["sharedPrefix"]
    # vLLM's own prefix-cache counter, through the node's telemetry (0 reads "no cache reuse observed").
    assert shared["cacheSource"] == "vllm:prefix_cache_hits", shared
    assert shared["cacheHits"] is not None
    for name in ("interactive", "throughput", "long-documents"):
        other = _benchmark(admin, model_id, name)
        assert (other["schemaVersion"], other["preset"]) == (2, name)
        assert all(level["failed"] == 0 for level in other["workloads"]["shortChat"])


@pytest.fixture
def closing() -> Iterator[contextlib.ExitStack]:
    with contextlib.ExitStack() as stack:
        yield stack


def test_a_real_vllm_starts_serves_reports_restarts_pending_is_adopted_and_fails_loudly(
    up: Up, run_id: str, closing: contextlib.ExitStack, tmp_path: Path
) -> None:
    password = up.first_run_password(up.start())
    admin = Admin(up.base_url, password)
    closing.callback(admin.close)
    docker_client = docker.from_env(version="auto", timeout=60)
    closing.callback(docker_client.close)
    model_id = f"tiny-{run_id}"
    model: dict[str, Any] = {
        "id": model_id,
        "servedName": "tiny-vllm",
        "image": up.env["MIRBAD_TEST_IMAGE"],
        "modelPath": MODEL_NAME,
        "maxModelLen": 256,
        "maxNumSeqs": 4,
        "memoryBudgetGiB": 4,
        "extraArgs": ["--dtype", "bfloat16", "--enforce-eager"],
    }
    admin.ok("POST", "/api/models", json=model)
    started = admin.ok("POST", f"/api/models/{model_id}/start")
    assert started["status"]["state"] in {"Starting", "Ready"}
    ready = _wait_state(admin, up, model_id, "Ready")

    # The builder's argv, labels and port binding on the real container.
    container = _container(docker_client, model_id)
    cmd = container.attrs["Config"]["Cmd"]
    assert cmd[:4] == ["--model", f"/models/{MODEL_NAME}", "--served-model-name", "tiny-vllm"]
    assert cmd[-3:] == ["--dtype", "bfloat16", "--enforce-eager"]
    labels = container.labels
    assert labels["mirbad.config-hash"] == ready["configHash"]
    assert float(labels["mirbad.budget-gib"]) == 4.0
    [binding] = container.attrs["HostConfig"]["PortBindings"]["8000/tcp"]
    assert (binding["HostIp"], int(binding["HostPort"])) == ("127.0.0.1", ready["port"])

    # The openai client through the master's /v1 and the agent's proxy.
    secret = admin.ok("POST", "/api/keys", json={"name": "vllm"})["secret"]
    client = openai.OpenAI(base_url=f"{up.base_url}/v1", api_key=secret, max_retries=0, timeout=WAIT_S)
    closing.callback(client.close)
    assert "tiny-vllm" in {listed.id for listed in client.models.list()}
    hello: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello"}]
    # Random weights may pick the end token at once; ignore_eos makes every answer 6 tokens long.
    answer = client.chat.completions.create(
        model="tiny-vllm",
        messages=hello,
        max_tokens=6,
        extra_body={"ignore_eos": True},
    )
    assert answer.usage is not None
    assert answer.usage.completion_tokens == 6
    chunks = list(
        client.chat.completions.create(
            model="tiny-vllm",
            messages=hello,
            max_tokens=6,
            stream=True,
            extra_body={"ignore_eos": True},
        )
    )
    assert len(chunks) >= 3
    assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    completion = client.completions.create(
        model="tiny-vllm", prompt="one two", max_tokens=5, extra_body={"ignore_eos": True}
    )
    assert completion.usage is not None
    assert completion.usage.completion_tokens == 5

    # Telemetry from the real /metrics: the generated tokens counted, a rate computed from them.
    def counted() -> dict[str, Any] | None:
        rows = [row for row in admin.ok("GET", "/api/status")["metrics"] if row["modelId"] == model_id]
        return rows[-1] if rows and rows[-1].get("generationTokensTotal", 0) >= 17 else None

    metrics = until(
        counted, lambda: f"no telemetry for {model_id}: {admin.ok('GET', '/api/status')}", timeout_s=WAIT_S
    )
    assert metrics is not None
    assert metrics["promptTokensTotal"] > 0
    assert "kvCacheUsage" in metrics

    shots = DOCS_SCREENSHOTS if os.environ.get("MIRBAD_UPDATE_SCREENSHOTS") == "1" else tmp_path / "shots"
    _photograph(up, password, model_id, shots)

    _benchmarks_count_what_vllm_counts(up, admin, model_id, secret, ready["port"])

    # A settings change: pending (the container's config-hash label differs from the saved definition's),
    # with old → new read back from the container's Cmd.
    admin.ok("PUT", f"/api/models/{model_id}", json={**model, "maxNumSeqs": 2})
    view = admin.view(model_id)
    assert view["restartPending"] is True
    assert {"field": "maxNumSeqs", "old": 4, "new": 2, "needsRestart": True} in view["changedSettings"]

    # SIGKILL the agent: `mirbad up` restarts it, and it adopts the running container.
    old_pid = _agent_pid(up.data_dir)
    assert old_pid is not None
    os.kill(old_pid, signal.SIGKILL)
    until(
        lambda: (
            _agent_pid(up.data_dir) not in (None, old_pid) and _state(admin, model_id)["state"] == "Ready"
        ),
        lambda: f"the agent was not restarted or lost the model:\n{up.log()}",
        timeout_s=WAIT_S,
    )
    assert _container(docker_client, model_id).id == container.id
    again = client.chat.completions.create(
        model="tiny-vllm",
        messages=hello,
        max_tokens=3,
        extra_body={"ignore_eos": True},
    )
    assert again.choices

    # The master killed (with its agent) and started again: the new master never launched the running
    # container, yet the pending restart and its old → new list come from the container's Cmd.
    up.kill()
    up.start()
    until(
        lambda: _state(admin, model_id)["state"] == "Ready",
        lambda: f"the restarted master did not see {model_id} Ready:\n{up.log()}",
        timeout_s=WAIT_S,
    )
    assert _container(docker_client, model_id).id == container.id
    view = admin.view(model_id)
    assert view["restartPending"] is True
    assert {"field": "maxNumSeqs", "old": 4, "new": 2, "needsRestart": True} in view["changedSettings"]
    assert view["changedSettingsProblem"] is None

    # Stop: the container is gone.
    admin.ok("POST", f"/api/models/{model_id}/stop")
    _wait_state(admin, up, model_id, "Stopped", WAIT_S)
    assert docker_client.containers.list(all=True, filters={"label": f"{MODEL_LABEL}={model_id}"}) == []

    # The same tiny weights as an embedding model: vLLM's pooling runner, /v1/embeddings through /v1.
    embed_id = f"embed-{run_id}"
    embed = {
        **model,
        "id": embed_id,
        "servedName": "tiny-embed",
        # float32: in bfloat16 vLLM CPU's pooling worker died of SIGILL (exit -4) on its first request in
        # five of eight runs on this machine's AMX-capable CPU; float32 passed every run.
        "extraArgs": ["--dtype", "float32", "--enforce-eager", "--runner", "pooling", "--convert", "embed"],
    }
    admin.ok("POST", "/api/models", json=embed)
    admin.ok("POST", f"/api/models/{embed_id}/start")
    _wait_state(admin, up, embed_id, "Ready")
    vectors = client.embeddings.create(model="tiny-embed", input=["hello world", "one two"])
    assert [len(item.embedding) for item in vectors.data] == [HIDDEN_SIZE, HIDDEN_SIZE]
    assert vectors.data[0].embedding != vectors.data[1].embedding
    # The embeddings preset on vLLM's pooling runner, through the master's API.
    embedded = _benchmark(admin, embed_id, "embeddings")["workloads"]["embeddings"]
    assert embedded["vectorsValid"], embedded
    assert embedded["dimension"] == HIDDEN_SIZE
    admin.ok("POST", f"/api/models/{embed_id}/stop")
    _wait_state(admin, up, embed_id, "Stopped", WAIT_S)

    # A flag vLLM refuses: Failed, with vLLM's own argparse line in the error.
    broken_id = f"broken-{run_id}"
    broken = {**model, "id": broken_id, "servedName": "broken", "extraArgs": ["--no-such-flag"]}
    admin.ok("POST", "/api/models", json=broken)
    admin.ok("POST", f"/api/models/{broken_id}/start")
    failed = _wait_state(admin, up, broken_id, "Failed")
    assert "unrecognized arguments: --no-such-flag" in (failed["error"] or "")
    assert up.interrupt() == 0
