"""A second node for ``mirbad up`` tests: a real ``mirbad-agent`` on loopback, enrolled with a join token.

It runs llama-server models (the tiny GGUF under its own model root, llama-server catalogued as version
``second`` through a wrapper that execs the real binary), as a node on another machine would.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from tests._support.asgi_server import free_port
from tests._support.mirbad_up import WAIT_S, Admin, port_block
from tests._support.polling import until
from tests._support.processes import kill_recorded_processes, stop_gently, write_exec_wrapper
from tests._support.real_parts import llama_server_path
from tests._support.tiny_gguf import TINY, TINY_MODEL_PATH, write_tiny_gguf

__all__ = ["far_model", "recorded_pid", "second_agent"]


@contextlib.contextmanager
def second_agent(admin: Admin, tmp_path: Path, name: str) -> Iterator[Path]:
    """A real ``mirbad-agent`` on loopback, enrolled with a join token, running llama-server models.

    Yields its state folder; at the end it gets SIGTERM, and whatever models it left run are killed.
    """
    port = free_port()
    issued = admin.ok(
        "POST",
        "/api/nodes/enrollment-tokens",
        json={"nodeName": name, "agentUrl": f"https://127.0.0.1:{port}"},
    )
    command = shlex.split(issued["installCommand"])
    state = tmp_path / name
    models = tmp_path / f"{name}-models"
    write_tiny_gguf(models / TINY_MODEL_PATH)
    server = llama_server_path()
    assert server is not None
    wrapper = write_exec_wrapper(tmp_path / "bin" / f"{name}-llama-server", server)
    first = port_block()
    settings = {
        "node_name": name,
        "state_dir": str(state),
        "host": "127.0.0.1",
        "port": port,
        "model_roots": [str(models)],
        "nvidia_smi": None,
        "hostd_socket": None,
        "telemetry_interval_s": 0.5,
        "docker": {"enabled": False},
        "process": {"enabled": True, "port_range_start": first, "port_range_end": first + 19},
        "executables": [
            {
                "name": "llama-server",
                "version": "second",
                "path": str(wrapper),
                "sha256": hashlib.sha256(wrapper.read_bytes()).hexdigest(),
            }
        ],
    }
    config = tmp_path / f"{name}.json"
    config.write_text(json.dumps(settings))
    agent = [sys.executable, "-m", "mirbad_agent"]
    # The command the master printed, as its node would run it (mirbad-agent is this interpreter's).
    assert command[:2] == ["mirbad-agent", "enroll"]
    subprocess.run(
        [*agent, *command[1:], "--san", "127.0.0.1", "--state-dir", str(state)],
        check=True,
        timeout=WAIT_S,
        capture_output=True,
    )
    log = (tmp_path / f"{name}.log").open("wb")
    child = subprocess.Popen([*agent, "serve", "--config", str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:
        until(
            lambda: any(n["id"] == name and n["reachable"] for n in admin.ok("GET", "/api/nodes")),
            lambda: (tmp_path / f"{name}.log").read_text(errors="replace")[-3000:],
            timeout_s=WAIT_S,
            poll_s=0.1,
        )
        yield state
    finally:
        stop_gently(child)
        log.close()
        kill_recorded_processes(state / "processes.json")


def recorded_pid(state: Path, model_id: str) -> int:
    """The pid of ``model_id``'s process as the agent with state folder ``state`` recorded it."""
    records = json.loads((state / "processes.json").read_text())["processes"]
    [record] = [record for record in records if record["modelId"] == model_id]
    return int(record["pid"])


def far_model(model_id: str, node_id: str = "gpu-2") -> dict[str, object]:
    """A tiny llama.cpp model placed on the second agent's node, as the admin API takes it."""
    return {
        "id": model_id,
        "servedName": "tiny-far",
        "runtime": "llamacpp",
        "executable": {"name": "llama-server", "version": "second"},
        "modelPath": TINY_MODEL_PATH,
        "maxModelLen": TINY.context,
        "memoryBudgetGiB": 0.25,
        "extraArgs": ["--threads", "1"],
        "placement": {"nodeId": node_id},
    }
