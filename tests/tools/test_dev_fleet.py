"""``tools/dev_fleet.py`` as a person runs it: a master and three agents, a model on a far node, Ctrl-C.

The command starts ``mirbad up`` and two more agents that enroll through the admin API; every node must
be reachable on its own port with its own state folder, a llama-server model placed on the third agent
must serve a chat through ``/v1``, and SIGINT (what Ctrl-C sends the command) must stop the model, the
agents and the master with exit code 0, leaving no process of the fleet behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests._support.asgi_server import free_port_block
from tests._support.polling import until
from tests._support.real_parts import llama_server_path
from tests._support.tiny_definition import tiny_llama_definition

pytestmark = [
    pytest.mark.llamacpp,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="checks processes through /proc"),
    pytest.mark.timeout(300),
]

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 120.0
AGENTS = 3


def _fleet_processes(data_dir: Path) -> list[int]:
    """The processes whose command line names the fleet's folder (the master, agents, llama-servers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if str(data_dir).encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
    return found


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], queue.Queue[str], Path, int]]:
    server = llama_server_path()
    assert server is not None
    # A block below the ephemeral range: a port the kernel may give an outgoing connection (the chaos
    # suite's load, say) could be taken by the time an agent binds it.
    data_dir, port = tmp_path / "fleet", free_port_block(200)
    command = [sys.executable, str(ROOT / "tools" / "dev_fleet.py"), "--agents", str(AGENTS)]
    command += ["--data-dir", str(data_dir), "--port", str(port), "--llama-server", str(server)]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True
    )
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put("")

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield process, lines, data_dir, port
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(WAIT_S)
        for pid in _fleet_processes(data_dir):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        process.wait(WAIT_S)
        reader.join(WAIT_S)  # it ends at the end of the output, before the pipe is closed
        assert process.stdout is not None
        process.stdout.close()


def _read_until(lines: queue.Queue[str], marker: str, seen: list[str]) -> None:
    while marker not in (seen[-1] if seen else ""):
        try:
            seen.append(lines.get(timeout=WAIT_S))
        except queue.Empty:
            pytest.fail(f"no {marker!r} within {WAIT_S} s:\n{''.join(seen)}")
        if seen[-1] == "":
            pytest.fail(f"the dev fleet ended before {marker!r}:\n{''.join(seen)}")


def test_a_master_and_three_agents_serve_and_stop_on_ctrl_c(
    fleet: tuple[subprocess.Popen[str], queue.Queue[str], Path, int],
) -> None:
    process, lines, data_dir, port = fleet
    seen: list[str] = []
    _read_until(lines, "Ctrl-C stops", seen)
    password = (data_dir / "dev-fleet-password").read_text().splitlines()[0]
    headers = {"Authorization": f"Bearer {password}"}
    with httpx.Client(
        base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=WAIT_S, trust_env=False
    ) as api:
        nodes = {node["name"]: node for node in api.get("/api/nodes").raise_for_status().json()}
        assert set(nodes) == {"local", "agent-2", "agent-3"}
        assert all(node["reachable"] for node in nodes.values())
        assert len({node["agentUrl"] for node in nodes.values()}) == AGENTS
        far = nodes["agent-3"]
        [llamacpp] = [r for r in far["info"]["runtimes"] if r["runtime"] == "llamacpp"]
        [executable] = llamacpp["executables"]
        definition = tiny_llama_definition(executable, placement={"nodeId": far["id"]})
        api.post("/api/models", json=definition).raise_for_status()
        api.post("/api/models/tiny/start").raise_for_status()
        status = until(
            lambda: (s := api.get("/api/models/tiny").json()["status"])["state"] == "Ready" and s,
            lambda: f"tiny never became Ready on agent-3: {api.get('/api/models/tiny').text}",
            timeout_s=WAIT_S,
            poll_s=0.2,
        )
        chat = {"model": "tiny-chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        answer = api.post("/v1/chat/completions", json=chat).raise_for_status().json()

    assert status["nodeId"] == far["id"]
    assert answer["usage"]["completion_tokens"] > 0
    llama_pid = int(status["pid"])
    records = json.loads((data_dir / "agent-3" / "processes.json").read_text())["processes"]
    assert [record["pid"] for record in records] == [llama_pid]  # its own agent's state folder

    process.send_signal(signal.SIGINT)  # what Ctrl-C sends the command
    assert process.wait(WAIT_S) == 0
    _read_until(lines, "dev fleet stopped", seen)
    assert "stopping tiny" in "".join(seen)
    assert _fleet_processes(data_dir) == []
    assert not Path(f"/proc/{llama_pid}").exists()
