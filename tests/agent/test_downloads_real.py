"""Downloads through a real ``mirbad-agent serve`` process: SIGKILL mid-file and resume; then the real
llama-server runs what was downloaded.

The hub holds the transfer after a fixed number of bytes, so "mid-file" is a known offset: the agent
has exactly those bytes on disk when it is killed, and its successor must ask for the rest with Range.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import httpx
import pytest
from anyio.abc import Process
from tests._support.agent_fleet import Fleet, create_fleet
from tests._support.asgi_server import free_port
from tests._support.model_hub import REPO, Hold, Sources
from tests._support.polling import eventually
from tests._support.real_parts import llama_server_path

from mirbad_protocol.downloads import DownloadJob, OllamaDownload
from mirbad_runtime.downloads import PARTIAL_SUFFIX, TEMP_PREFIX, DownloadManager


def on_disk(path: Path) -> int:
    """The size of ``path``, 0 while it does not exist."""
    return path.stat().st_size if path.is_file() else 0


pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SIGKILLs a child process"),
]

WAIT_S = 30.0
HELD_AT = 96 * 1024


def _config(tmp_path: Path, servers: Sources, port: int) -> Path:
    settings = {
        "node_name": "node-1",
        "state_dir": str(tmp_path / "state"),
        "host": "127.0.0.1",
        "port": port,
        "model_roots": [str(tmp_path / "models")],
        "nvidia_smi": None,
        "graceful_shutdown_s": 2,
        "docker": {"enabled": False},
        "process": {"enabled": False},
        "downloads": {"hf_endpoint": servers.hub_url, "ollama_registry": servers.registry_url},
    }
    path = tmp_path / "agent.json"
    path.write_text(json.dumps(settings))
    return path


async def _spawn(argv: list[str], log: Path, env: dict[str, str] | None = None) -> Process:
    # The child keeps its own copy of the log's descriptor; ours is closed at once.
    with log.open("ab") as output:
        return await anyio.open_process(argv, stdout=output, stderr=subprocess.STDOUT, env=env)


async def _start_agent(config: Path, log: Path, client: httpx.AsyncClient) -> Process:
    process = await _spawn([sys.executable, "-m", "mirbad_agent", "serve", "--config", str(config)], log)

    async def answers() -> bool:
        try:
            return (await client.get("/runtimes")).status_code == 200
        except httpx.TransportError:
            return False

    with anyio.fail_after(WAIT_S):
        while not await answers():
            if process.returncode is not None:
                pytest.fail(f"the agent exited with {process.returncode}; its log is {log}")
            await anyio.sleep(0.1)
    return process


async def _kill(process: Process) -> None:
    process.send_signal(signal.SIGKILL)
    with anyio.fail_after(WAIT_S):
        await process.wait()


async def _job(client: httpx.AsyncClient, job_id: str) -> DownloadJob:
    return DownloadJob.from_wire((await client.get(f"/downloads/{job_id}")).json())


def _client(fleet: Fleet, port: int) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=f"https://127.0.0.1:{port}/agent/v1",
        verify=fleet.master.client_context(),
        timeout=WAIT_S,
        trust_env=False,
    )


async def test_a_sigkilled_agent_resumes_the_download_from_the_bytes_on_disk(
    tmp_path: Path, servers: Sources
) -> None:
    fleet, port = create_fleet(), free_port()
    fleet.save_agent(tmp_path / "state")
    (tmp_path / "models").mkdir()
    config, log = _config(tmp_path, servers, port), tmp_path / "agent.log"
    servers.hub.hold = hold = Hold("weights/tiny.gguf", after_bytes=HELD_AT)
    async with _client(fleet, port) as client:
        first = await _start_agent(config, log, client)
        try:
            body = {"kind": "huggingface", "repoId": REPO, "folder": "tiny", "allowPatterns": ["*.gguf"]}
            started = await client.post("/downloads", json=body)
            assert started.status_code == 202, started.text
            job_id = started.json()["id"]
            partial = (
                tmp_path / "models" / f"{TEMP_PREFIX}{job_id}" / "weights" / f"tiny.gguf{PARTIAL_SUFFIX}"
            )
            with anyio.fail_after(WAIT_S):
                await hold.reached.wait()
            await eventually(
                lambda: partial.is_file() and partial.stat().st_size == HELD_AT, timeout_s=WAIT_S
            )
        finally:
            await _kill(first)
        assert not (tmp_path / "models" / "tiny").exists()
        hold.release()
        second = await _start_agent(config, log, client)
        try:
            with anyio.fail_after(WAIT_S):
                while (job := await _job(client, job_id)).state != "completed":
                    assert job.state in ("queued", "running", "verifying"), job.error
                    await anyio.sleep(0.05)
        finally:
            second.terminate()
            with anyio.fail_after(WAIT_S):
                await second.wait()
    assert ("weights/tiny.gguf", f"bytes={HELD_AT}-") in servers.hub.requests
    assert (tmp_path / "models" / "tiny" / "weights" / "tiny.gguf").read_bytes() == servers.gguf
    assert job.revision == servers.commit


@pytest.mark.llamacpp
async def test_llama_server_serves_the_downloaded_ollama_gguf(tmp_path: Path, servers: Sources) -> None:
    root = tmp_path / "models"
    root.mkdir()
    async with anyio.create_task_group() as group:
        manager = DownloadManager(
            [root], tmp_path / "state", hf_endpoint=servers.hub_url, ollama_registry=servers.registry_url
        )
        await group.start(manager.run)
        job = await manager.start(OllamaDownload(model="tiny", folder="tiny-ollama"))
        await eventually(lambda: manager.get(job.id).state in ("completed", "failed"), timeout_s=WAIT_S)
        assert manager.get(job.id).state == "completed", manager.get(job.id).error
        group.cancel_scope.cancel()
    binary = llama_server_path()
    assert binary is not None  # the llamacpp marker skips (or fails) the test without it
    port = free_port()
    argv = [str(binary), "-m", str(root / "tiny-ollama" / "model.gguf"), "--host", "127.0.0.1"]
    env = {name: value for name, value in os.environ.items() if not name.startswith("LLAMA_ARG_")}
    log = tmp_path / "llama-server.log"
    server = await _spawn([*argv, "--port", str(port), "-c", "256"], log, env)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=WAIT_S) as client:
            with anyio.fail_after(WAIT_S):
                while not await _healthy(client):
                    assert server.returncode is None, f"llama-server exited; its log is {log}"
                    await anyio.sleep(0.05)
            answer = await client.post(
                "/v1/chat/completions",
                json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8},
            )
            assert answer.status_code == 200, answer.text
            assert answer.json()["choices"][0]["message"]["content"]
    finally:
        server.kill()
        with anyio.fail_after(WAIT_S):
            await server.wait()


async def _healthy(client: httpx.AsyncClient) -> bool:
    try:
        return (await client.get("/health")).status_code == 200
    except httpx.TransportError:
        return False
