"""The README's two ways to a first chat model, run as written (issue 24 item 1).

Each block the README marks ``<!-- first-model: … -->`` runs verbatim in bash against a real ``mirbad up``
(its master, its agent and the real llama-server); only the README's port 8080 becomes the test's port and
its ``.venv/bin/`` the running environment's, and ``PW``, ``MIRBAD_DATA_DIR`` and ``MIRBAD_PORT`` come
from the environment as they would in the reader's shell. The network block downloads from a loopback
stand-in hub named by the agent's documented ``[downloads] hf_endpoint``; it serves the tiny demo GGUF
under the README's repository and file name. The offline block needs nothing but ``mirbad demo``.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from tests._support.asgi_server import serve_asgi
from tests._support.mirbad_up import Up, mirbad_up, port_block
from tests._support.model_hub import TestHub, refused_endpoint
from tests._support.real_parts import llama_server_path

from mirbad_master.demo import write_tiny_gguf

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.llamacpp,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="runs mirbad up's process tree"),
    pytest.mark.timeout(300),
]

ROOT = Path(__file__).resolve().parents[2]
README_PORT = "127.0.0.1:8080"
README_BIN = ".venv/bin/"
BLOCK_TIMEOUT_S = 120


def readme_block(name: str) -> str:
    """The bash block the README marks ``<!-- first-model: name -->``."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    found = re.search(rf"<!-- first-model: {name} -->\n```bash\n(.*?)```", text, re.DOTALL)
    assert found is not None, f"README.md has no first-model block {name!r}"
    return found.group(1)


def agent_config(hf_endpoint: str) -> dict[str, Any]:
    first = port_block()
    return {
        "graceful_shutdown_s": 2,
        "downloads": {"hf_endpoint": hf_endpoint, "ollama_registry": refused_endpoint()},
        "docker": {"enabled": False},
        "process": {"port_range_start": first, "port_range_end": first + 19, "stop_timeout_s": 5},
    }


async def run_block(up: Up, password: str, block: str) -> list[str]:
    """Run ``block`` as the reader would, in the repository root; return its output lines."""
    # The README's ``.venv/bin/`` is where ``dev.py`` puts the environment; CI keeps it elsewhere
    # (UV_PROJECT_ENVIRONMENT), so the block runs the commands of the environment running this test.
    bin_dir = f"{Path(sys.executable).parent}/"
    script = block.replace(README_PORT, f"127.0.0.1:{up.port}").replace(README_BIN, bin_dir)
    env = {
        **os.environ,
        "PW": password,
        "MIRBAD_DATA_DIR": str(up.data_dir),
        "MIRBAD_PORT": str(up.port),
    }
    # The README's "until" loops have no bound of their own: the timeout is the test's.
    done = await anyio.run_process(
        ["timeout", str(BLOCK_TIMEOUT_S), "bash", "-e", "-o", "pipefail", "-c", script],
        cwd=ROOT,
        env=env,
        check=False,
    )
    output = done.stdout.decode() + done.stderr.decode()
    assert done.returncode == 0, f"exit {done.returncode}:\n{output}\n--- mirbad up's log:\n{up.log()}"
    return done.stdout.decode().splitlines()


def chat_answer(lines: list[str]) -> dict[str, Any]:
    """The last JSON answer the block printed (curl adds no newline, so answers run together)."""
    decoder, text, index = json.JSONDecoder(), lines[-1], 0
    answer: dict[str, Any] = {}
    while index < len(text):
        answer, index = decoder.raw_decode(text, index)
    return answer


async def test_the_readme_offline_block_defines_starts_and_chats_with_the_demo_model(tmp_path: Path) -> None:
    server = llama_server_path()
    assert server is not None
    with mirbad_up(tmp_path, agent_config(refused_endpoint()), llama_server=server) as up:
        # mirbad_up put the tests' copy there; the reader's machine has none, so neither does this one.
        (up.data_dir / "models" / "tiny" / "tiny-llama.gguf").unlink()
        banner = await anyio.to_thread.run_sync(up.start)
        lines = await run_block(up, up.first_run_password(banner), readme_block("offline"))

    answer = chat_answer(lines)
    assert (up.data_dir / "models" / "tiny" / "tiny-llama.gguf").is_file()
    assert "defined 'tiny-llama'" in lines
    assert answer["model"] == "tiny-llama"
    assert answer["choices"][0]["message"]["role"] == "assistant"


async def test_the_readme_network_block_downloads_starts_and_chats(tmp_path: Path) -> None:
    server = llama_server_path()
    assert server is not None
    hub = TestHub()
    gguf = write_tiny_gguf(tmp_path / "source" / "tiny.gguf").read_bytes()
    hub.add_repo("Qwen/Qwen3-0.6B-GGUF", {"Qwen3-0.6B-Q8_0.gguf": gguf, "README.md": b"hi"})
    async with serve_asgi(hub.app()) as hub_url:
        with mirbad_up(tmp_path, agent_config(hub_url), llama_server=server) as up:
            banner = await anyio.to_thread.run_sync(up.start)
            lines = await run_block(up, up.first_run_password(banner), readme_block("network"))

    answer = chat_answer(lines)
    assert (up.data_dir / "models" / "qwen3-0.6b" / "Qwen3-0.6B-Q8_0.gguf").read_bytes() == gguf
    assert answer["model"] == "qwen3-0.6b"
    assert answer["choices"][0]["message"]["role"] == "assistant"
