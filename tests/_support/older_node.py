"""Start the older-agent stand-in (:mod:`tests._support.older_agent`) as a second node of a running master.

A test gets a join token from the master, starts the stand-in in its own process with it, waits until
the master sees the node as the test needs, and removes the node again afterwards.
"""

from __future__ import annotations

import contextlib
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
from tests._support.asgi_server import free_port
from tests._support.polling import until
from tests._support.processes import stop_gently

__all__ = ["enrolled_older_agent"]

_ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def enrolled_older_agent(
    api: httpx.Client,
    name: str,
    version: str,
    folder: Path,
    *,
    ready: Callable[[], bool],
    timeout_s: float,
    log_name: str = "agent.log",
) -> Iterator[None]:
    """Enroll node ``name`` as this stand-in reporting ``version``, until ``ready()``; remove it after.

    Args:
        api: a client of the master's ``/api`` signed in as the administrator.
        name: the node's name.
        version: the version the agent reports.
        folder: where the agent's state folder (``agent``) and its log go.
        ready: what says the master sees the node as the test needs it.
        timeout_s: how long ``ready`` may take.
        log_name: the log's file name in ``folder``.
    """
    port = free_port()
    issued = api.post(
        "/nodes/enrollment-tokens", json={"nodeName": name, "agentUrl": f"https://127.0.0.1:{port}"}
    )
    assert issued.status_code == 201, issued.text
    command = shlex.split(issued.json()["installCommand"])
    enroll_url = command[command.index("--master") + 1]
    arguments = [enroll_url, issued.json()["token"], name, str(folder / "agent"), str(port), version]
    logged = folder / log_name
    with logged.open("wb") as log:
        child = subprocess.Popen(
            [sys.executable, "-m", "tests._support.older_agent", *arguments],
            cwd=_ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        until(
            ready,
            lambda: f"node {name} not ready:\n{logged.read_text(errors='replace')[-3000:]}",
            timeout_s=timeout_s,
        )
        yield
    finally:
        stop_gently(child)
        api.delete(f"/nodes/{name}")
