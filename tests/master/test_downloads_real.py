"""Downloads end to end: ``mirbad up`` (master and its real agent) and a loopback Ollama registry.

A llama.cpp model whose GGUF is not on its node is refused (409 naming the path) by the real agent's
own check; the GGUF is then downloaded through the master's API from the registry and the real
llama-server serves it over ``/v1``. The registry runs in the test's event loop, so every blocking
call to ``mirbad up`` goes through a worker thread.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from tests._support.mirbad_up import WAIT_S, mirbad_up, port_block
from tests._support.model_hub import loopback_sources, refused_endpoint
from tests._support.real_parts import llama_server_path
from tests._support.tiny_gguf import TINY, write_tiny_gguf

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.llamacpp,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="runs mirbad up's process tree"),
    pytest.mark.timeout(300),
]

FOLDER = "tiny-ollama"


async def until_true(condition: Callable[[], Awaitable[bool]]) -> None:
    """Poll ``condition`` (each an admin API read) until it holds, within WAIT_S."""
    with anyio.fail_after(WAIT_S):
        while not await condition():  # noqa: ASYNC110 - polled by design: nothing signals the change
            await anyio.sleep(0.1)


async def test_a_gguf_downloaded_through_the_master_is_served_by_the_real_llama_server(
    tmp_path: Path,
) -> None:
    server = llama_server_path()
    assert server is not None
    gguf = write_tiny_gguf(tmp_path / "source" / "tiny.gguf").read_bytes()
    first = port_block()
    async with loopback_sources(gguf) as sources:
        agent_config = {
            "graceful_shutdown_s": 2,
            # The hub is a closed port: a Hugging Face start is refused clearly (issue 31 item 7).
            "downloads": {"hf_endpoint": refused_endpoint(), "ollama_registry": sources.registry_url},
            "docker": {"enabled": False},
            "process": {"port_range_start": first, "port_range_end": first + 19, "stop_timeout_s": 5},
        }
        with mirbad_up(tmp_path, agent_config, llama_server=server) as up:
            banner = await anyio.to_thread.run_sync(up.start)
            password = up.first_run_password(banner)
            headers = {"Authorization": f"Bearer {password}"}
            async with httpx.AsyncClient(
                base_url=up.base_url, headers=headers, timeout=WAIT_S, trust_env=False
            ) as admin:
                await _download_then_serve(admin)


async def _download_then_serve(admin: httpx.AsyncClient) -> None:
    [node] = (await admin.get("/api/nodes")).json()
    [executable] = next(r for r in node["info"]["runtimes"] if r["runtime"] == "llamacpp")["executables"]
    model = {
        "id": "downloaded",
        "servedName": "downloaded-chat",
        "runtime": "llamacpp",
        "executable": executable,
        "modelPath": f"{FOLDER}/model.gguf",
        "maxModelLen": TINY.context,
        "maxNumSeqs": 1,
        "memoryBudgetGiB": 0.25,
        "extraArgs": ["--threads", "1"],
    }
    assert (await admin.post("/api/models", json=model)).status_code == 201

    missing = await admin.post("/api/models/downloaded/start")
    started = await admin.post(
        "/api/nodes/local/downloads", json={"kind": "ollama", "model": "tiny", "folder": FOLDER}
    )
    job = started.json()
    unreachable = await admin.post(
        "/api/nodes/local/downloads", json={"kind": "huggingface", "repoId": "mirbad/tiny", "folder": "hub"}
    )
    seen: list[dict[str, Any]] = []

    async def completed() -> bool:
        seen.append((await admin.get(f"/api/nodes/local/downloads/{job['id']}")).json())
        # A queued job has no "state" on the wire (fields at their defaults are left out).
        return seen[-1].get("state") in ("completed", "failed")

    await until_true(completed)
    start = await admin.post("/api/models/downloaded/start")

    async def ready() -> bool:
        state: str = (await admin.get("/api/models/downloaded")).json()["status"]["state"]
        return state == "Ready"

    await until_true(ready)
    chat = await admin.post(
        "/v1/chat/completions",
        json={"model": "downloaded-chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
    )

    assert "downloads.ollama" in node["info"]["features"]
    assert missing.status_code == 409, missing.text
    assert missing.json()["error"]["code"] == "model_files_missing"
    assert f"{FOLDER}/model.gguf" in missing.json()["error"]["message"]
    assert started.status_code == 202, started.text
    assert (unreachable.status_code, unreachable.json()["error"]["code"]) == (502, "node_refused")
    assert "cannot reach the hub" in unreachable.json()["error"]["message"]
    assert (seen[-1]["state"], seen[-1]["doneBytes"]) == ("completed", seen[-1]["totalBytes"])
    assert start.status_code == 200, start.text
    assert chat.status_code == 200, chat.text
    assert chat.json()["choices"][0]["message"]["role"] == "assistant"
