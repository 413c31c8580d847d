"""An idle agent does not load what only some of its jobs need (its idle memory is a target of issue 16).

docker-py (with requests) and huggingface_hub (with yaml, tqdm and filelock) were ~23 MB of the agent's
~98 MB at rest; they are imported when a container driver connects or a download is planned. httpx's
command line (rich, pygments) is not imported at all, nor aiohttp, which only the master's hop to its
agents sends with (7 MB): the agent's proxy client forwards with httpcore. Checked in a fresh
interpreter, since this test process has imported everything already.
"""

from __future__ import annotations

import json
import subprocess
import sys

LAZY = ["docker", "requests", "huggingface_hub", "yaml", "tqdm", "rich", "pygments", "aiohttp"]


def test_the_agents_entry_point_loads_neither_docker_nor_the_hub_client() -> None:
    probe = (
        "import json, sys\n"
        "import mirbad_agent.cli, mirbad_agent._app, mirbad_agent._serve\n"
        "from mirbad_router import create_upstream_client\n"
        "create_upstream_client()  # the agent's proxy client, as its composition makes it\n"
        f"print(json.dumps([name for name in {LAZY!r} if name in sys.modules]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(result.stdout) == []


def test_the_lazy_docker_module_is_docker_py_once_used() -> None:
    probe = (
        "import json, sys\n"
        "from mirbad_runtime._lazy_modules import docker\n"
        "before = 'docker' in sys.modules\n"
        "import docker as real\n"
        "same = docker.errors.NotFound is real.errors.NotFound\n"
        "print(json.dumps([before, same, 'lazy' in repr(docker)]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(result.stdout) == [False, True, True]


def test_httpx_without_its_command_line_still_has_a_main() -> None:
    # httpx's own fallback when its CLI cannot be imported: a main that says what to install.
    probe = (
        "import json, sys\n"
        "import mirbad_agent, httpx\n"
        "print(json.dumps([sys.modules.get('httpx._main', 'absent') is None, callable(httpx.main)]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(result.stdout) == [True, True]
