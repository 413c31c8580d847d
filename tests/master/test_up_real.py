"""``mirbad up`` end to end: the real command, a real agent, llama-server, a container and the openai client.

One scenario, in the order an operator lives it: the first run prints the URL and the password; a
llama-server model and a container model are registered and started through ``/api``; the real
``openai`` client lists, chats (streamed and not) and embeds through ``/v1`` with an API key, and gets
its own exception types for an unknown model and a bad key. llama-server is then killed three times:
twice it comes back, the third crash pauses its restarts. Ctrl-C stops everything (no llama-server,
no container, no agent left), and a second run on the same data directory has the models, the key and
the pause, and brings back the model that was running.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import docker
import openai
import pytest
from tests._support.docker_image import ensure_test_image
from tests._support.mirbad_up import WAIT_S, Admin, Up, mirbad_up, port_block
from tests._support.polling import until
from tests._support.processes import write_exec_wrapper
from tests._support.real_parts import llama_server_path
from tests._support.second_agent import far_model, recorded_pid, second_agent
from tests._support.tiny_gguf import TINY, TINY_MODEL_PATH

pytestmark = [
    pytest.mark.llamacpp,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="checks processes through /proc"),
    pytest.mark.timeout(300),
]

POLL_S = 0.1


_until = partial(until, timeout_s=WAIT_S, poll_s=POLL_S)


@dataclass(frozen=True)
class Names:
    run: str

    @property
    def llama(self) -> str:
        return f"tiny-{self.run}"

    @property
    def container(self) -> str:
        return f"fake-{self.run}"

    @property
    def network(self) -> str:
        return f"mirbad-test-{self.run}"


@pytest.fixture
def names() -> Names:
    return Names(os.urandom(3).hex())


@pytest.fixture
def up(tmp_path: Path, names: Names) -> Iterator[Up]:
    server = llama_server_path()
    assert server is not None
    client = docker.from_env(version="auto", timeout=30)
    image = ensure_test_image(client)
    # Twenty ports for containers, the next twenty for processes (the drivers skip busy ones).
    first = port_block()
    agent_config = {
        "telemetry_interval_s": 0.5,
        "graceful_shutdown_s": 2,
        "docker": {
            "network": names.network,
            "gpus": False,
            "stop_timeout_s": 2,
            "port_range_start": first,
            "port_range_end": first + 19,
        },
        "process": {
            "port_range_start": first + 20,
            "port_range_end": first + 39,
            "stop_timeout_s": 5,
        },
    }
    env = {"MIRBAD_CRASH_BACKOFF_S": "0.3", "MIRBAD_TEST_IMAGE": image}
    try:
        with mirbad_up(tmp_path, agent_config, llama_server=server, env=env) as started:
            yield started
    finally:
        for container in client.containers.list(all=True, filters={"name": f"ss-{names.container}"}):
            container.remove(force=True)
        for network in client.networks.list(names=[names.network]):
            network.remove()
        client.close()


def _llama_pid(data_dir: Path, model_id: str) -> int:
    records = json.loads((data_dir / "agent" / "processes.json").read_text())["processes"]
    [record] = [record for record in records if record["modelId"] == model_id]
    return int(record["pid"])


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.fixture
def closing() -> Iterator[contextlib.ExitStack]:
    with contextlib.ExitStack() as stack:
        yield stack


@pytest.mark.docker
def test_mirbad_up_serves_openai_restarts_crashes_and_keeps_its_data(
    up: Up, names: Names, closing: contextlib.ExitStack
) -> None:
    banner = up.start()
    password = up.first_run_password(banner)
    assert any(f"{up.base_url}/v1" in line for line in banner)
    admin = Admin(up.base_url, password)
    closing.callback(admin.close)

    # The local agent enrolled over loopback and offers both runtimes, with this machine's llama-server.
    [node] = admin.ok("GET", "/api/nodes")
    assert (node["id"], node["local"], node["reachable"]) == ("local", True, True)
    runtimes = {runtime["runtime"]: runtime for runtime in node["info"]["runtimes"]}
    assert set(runtimes) == {"vllm", "llamacpp"}
    [executable] = runtimes["llamacpp"]["executables"]

    llama = {
        "id": names.llama,
        "servedName": "tiny-chat",
        "runtime": "llamacpp",
        "executable": executable,
        "modelPath": TINY_MODEL_PATH,
        "maxModelLen": TINY.context,
        "maxNumSeqs": 2,
        "memoryBudgetGiB": 0.25,
        "extraArgs": ["--threads", "1", "--embeddings", "--pooling", "mean"],
    }
    image = up.env["MIRBAD_TEST_IMAGE"]
    container = {
        "id": names.container,
        "servedName": "fake-chat",
        "image": image,
        "modelPath": "fake",
        "memoryBudgetGiB": 0.25,
    }
    admin.ok("POST", "/api/models", json=llama)
    admin.ok("POST", "/api/models", json=container)
    admin.ok("POST", f"/api/models/{names.llama}/start")
    admin.wait_ready(names.llama)
    admin.ok("POST", f"/api/models/{names.container}/start")  # one start at a time on unified memory
    admin.wait_ready(names.container)
    secret = admin.ok("POST", "/api/keys", json={"name": "e2e"})["secret"]

    # The real openai client through /v1.
    client = openai.OpenAI(base_url=f"{up.base_url}/v1", api_key=secret, max_retries=0, timeout=WAIT_S)
    closing.callback(client.close)
    assert {model.id for model in client.models.list()} >= {"tiny-chat", "fake-chat"}
    answer = client.chat.completions.create(
        model="tiny-chat", messages=[{"role": "user", "content": "hello"}], max_tokens=8
    )
    assert isinstance(answer.choices[0].message.content, str)
    assert answer.usage is not None
    assert answer.usage.completion_tokens > 0
    for model in ("tiny-chat", "fake-chat"):
        chunks = list(
            client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "hello"}], max_tokens=6, stream=True
            )
        )
        assert len(chunks) >= 2, model
        assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices), model
    embedding = client.embeddings.create(model="tiny-chat", input="hello world")
    assert len(embedding.data[0].embedding) == TINY.width
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "hi"}])
    stranger = openai.OpenAI(base_url=f"{up.base_url}/v1", api_key="mb-not-a-key", max_retries=0)
    closing.callback(stranger.close)
    with pytest.raises(openai.AuthenticationError):
        stranger.models.list()
    [usage] = [row for row in admin.ok("GET", "/api/keys/usage") if row["servedName"] == "tiny-chat"]
    assert usage["requests"] >= 3

    # Crash restarts: two crashes come back, the third pauses the restarts.
    for crash in (1, 2, 3):
        status = admin.wait_ready(names.llama)
        pid = _llama_pid(up.data_dir, names.llama)
        os.kill(pid, signal.SIGKILL)
        if crash < 3:
            admin.wait_ready(names.llama, after=status["startedAt"])
    paused = _until(
        lambda: admin.view(names.llama)["pause"],
        lambda: f"no pause after 3 crashes: {admin.view(names.llama)}\n{up.log()}",
    )
    assert paused["crashes"] == 3
    assert admin.view(names.llama)["status"]["state"] == "Failed"

    # Ctrl-C: models first, then the agent; nothing is left running.
    agent_pid = int((up.data_dir / "agent" / "agent.pid").read_text())
    assert up.interrupt() == 0
    assert any("Mirbad stopped" in line for line in [*up.seen, *_drain(up)])
    assert not _alive(agent_pid)
    assert not _alive(pid)
    records = json.loads((up.data_dir / "agent" / "processes.json").read_text())["processes"]
    assert records == []
    docker_client = docker.from_env(version="auto", timeout=30)
    try:
        assert docker_client.containers.list(all=True, filters={"name": f"ss-{names.container}"}) == []
    finally:
        docker_client.close()

    # A second run on the same data: no new password, models, key and pause kept, the running set back.
    banner = up.start()
    assert not any("Admin password:" in line for line in banner)
    admin = Admin(up.base_url, password)
    closing.callback(admin.close)
    ids = [view["definition"]["id"] for view in admin.ok("GET", "/api/models")]
    assert {names.llama, names.container} <= set(ids)
    assert [key["name"] for key in admin.ok("GET", "/api/keys")] == ["e2e"]
    assert admin.view(names.llama)["pause"]["crashes"] == 3
    admin.wait_ready(names.container)
    assert admin.view(names.llama)["status"]["state"] == "Stopped"  # paused: not brought back
    again = client.chat.completions.create(
        model="fake-chat", messages=[{"role": "user", "content": "back?"}], max_tokens=4
    )
    assert again.choices
    assert up.interrupt() == 0


def _drain(up: Up) -> list[str]:
    rest: list[str] = []
    with contextlib.suppress(queue.Empty):
        while (line := up.lines.get_nowait()) != "":
            rest.append(line)
    return rest


FORWARDING_PARENT = """
import signal, subprocess, sys
child = subprocess.Popen(sys.argv[1:])
# What uv run does: the child stays in the terminal's group and gets each SIGINT forwarded as well.
signal.signal(signal.SIGINT, lambda signum, frame: child.send_signal(signal.SIGINT))
sys.exit(child.wait())
"""


@pytest.fixture
def up_llama(tmp_path: Path) -> Iterator[Up]:
    """``mirbad up`` with llama-server only (no Docker), catalogued as a wrapper that execs it."""
    server = llama_server_path()
    assert server is not None
    wrapper = write_exec_wrapper(tmp_path / "bin" / "llama-server", server)
    first = port_block()
    agent_config = {
        "telemetry_interval_s": 0.5,
        "graceful_shutdown_s": 2,
        "docker": {"enabled": False},
        "process": {"port_range_start": first, "port_range_end": first + 19, "stop_timeout_s": 5},
    }
    with mirbad_up(
        tmp_path, agent_config, llama_server=wrapper, env={"MIRBAD_CRASH_BACKOFF_S": "0.3"}
    ) as started:
        yield started


def _agent_pid(data_dir: Path) -> int | None:
    # None while a restarted agent has not written its pid file yet.
    try:
        return int((data_dir / "agent" / "agent.pid").read_text())
    except FileNotFoundError:
        return None


@pytest.mark.parametrize("parent", ["direct", "forwarding-parent"])
def test_ctrl_c_to_the_group_stops_the_models_even_when_the_agent_died(
    up_llama: Up, names: Names, closing: contextlib.ExitStack, tmp_path: Path, parent: str
) -> None:
    """Ctrl-C as a terminal sends it, straight to ``mirbad up`` or under a parent that forwards it.

    ``uv run`` may not run against the test environment, so a stand-in parent plays it: it stays in
    the group and forwards each SIGINT to its child, so ``mirbad up`` gets two within milliseconds.
    On the way, the agent is killed: it comes back and adopts the running model; killed again right
    before Ctrl-C, it is brought back once more to stop the model. Nothing is left running.
    """
    up = up_llama
    forwarding = tmp_path / "forwarding_parent.py"
    forwarding.write_text(FORWARDING_PARENT)
    banner = up.start(parent=[sys.executable, str(forwarding)] if parent != "direct" else None)
    admin = Admin(up.base_url, up.first_run_password(banner))
    closing.callback(admin.close)
    [node] = admin.ok("GET", "/api/nodes")
    [executable] = next(r for r in node["info"]["runtimes"] if r["runtime"] == "llamacpp")["executables"]
    llama = {
        "id": names.llama,
        "servedName": "tiny-chat",
        "runtime": "llamacpp",
        "executable": executable,
        "modelPath": TINY_MODEL_PATH,
        "maxModelLen": TINY.context,
        "memoryBudgetGiB": 0.25,
        "extraArgs": ["--threads", "1"],
    }
    admin.ok("POST", "/api/models", json=llama)
    admin.ok("POST", f"/api/models/{names.llama}/start")
    ready = admin.wait_ready(names.llama)
    pid = _llama_pid(up.data_dir, names.llama)

    # A dead agent is restarted and adopts the model: same process, still Ready, never restarted.
    first_agent = _agent_pid(up.data_dir)
    assert first_agent is not None
    os.killpg(first_agent, signal.SIGKILL)
    _until(
        lambda: (
            _agent_pid(up.data_dir) not in (None, first_agent)
            and admin.ok("GET", "/api/nodes")[0]["reachable"]
        ),
        lambda: f"the agent did not come back:\n{up.log()}",
    )
    assert admin.wait_ready(names.llama)["startedAt"] == ready["startedAt"]
    assert _llama_pid(up.data_dir, names.llama) == pid

    second_agent = _agent_pid(up.data_dir)
    assert second_agent is not None
    os.killpg(second_agent, signal.SIGKILL)
    assert up.interrupt_group() == 0

    last = [*up.seen, *_drain(up)][-1]
    assert last == f"Mirbad stopped (1 model(s) stopped: {names.llama} (pid {pid}); none left running)."
    assert not _alive(pid)
    assert json.loads((up.data_dir / "agent" / "processes.json").read_text())["processes"] == []
    assert "SIGINT again" not in up.log()


def test_a_pinned_agent_port_is_taken_back_from_the_agent_a_killed_master_left(tmp_path: Path) -> None:
    # Issue 31 item 17: after kill -9 the agent (its own session) kept --agent-port, and the next
    # `mirbad up --agent-port A` refused the port instead of stopping the agent its pid file names.
    server = llama_server_path()
    assert server is not None
    agent_port = port_block()
    pinned = ["--agent-port", str(agent_port)]
    with mirbad_up(tmp_path, {"graceful_shutdown_s": 2}, llama_server=server) as up:
        password = up.first_run_password(up.start(args=pinned))
        pid_file = up.data_dir / "agent" / "agent.pid"
        orphan = int(pid_file.read_text())
        up.kill()  # SIGKILL to mirbad up's group: no goodbye, the agent lives on
        orphaned = _alive(orphan)

        up.start(args=pinned)
        successor = int(pid_file.read_text())
        admin = Admin(up.base_url, password)
        try:
            _until(lambda: admin.ok("GET", "/api/nodes")[0]["reachable"], lambda: "the agent never answered")
            trace = admin.http.request("TRACE", "/api/models")
        finally:
            admin.close()
        status = up.interrupt()

    assert orphaned
    assert not _alive(orphan)
    assert successor != orphan
    assert status == 0
    # The real portal's catch-all is behind /api: an unsupported method is the API's 405 (issue 31 item 18).
    assert trace.status_code == 405
    assert trace.json()["error"]["code"] == "method_not_allowed"


def _portal_websocket(up: Up) -> None:
    """Open and close one of the portal's WebSockets, as every browser tab does (uvicorn logs it)."""
    from websockets.sync.client import connect

    url = f"ws://127.0.0.1:{up.port}/_nicegui_ws/socket.io/?EIO=4&transport=websocket"
    with connect(url, open_timeout=WAIT_S) as socket:
        assert str(socket.recv(timeout=WAIT_S)).startswith("0")  # engine.io's open packet: accepted


def test_ctrl_c_names_the_models_left_running_on_another_node(
    up_llama: Up, names: Names, closing: contextlib.ExitStack, tmp_path: Path
) -> None:
    """``mirbad up`` stops its own models; another node's keep running and the last line says where."""
    up = up_llama
    admin = Admin(up.base_url, up.first_run_password(up.start()))
    closing.callback(admin.close)
    far = f"{names.llama}-far"
    with second_agent(admin, tmp_path, "gpu-2") as state:
        definition = far_model(far)
        admin.ok("POST", "/api/models", json=definition)
        admin.ok("POST", f"/api/models/{far}/start")
        admin.wait_ready(far)
        pid = recorded_pid(state, far)
        _portal_websocket(up)
        assert up.interrupt() == 0
        last = [*up.seen, *_drain(up)][-1]
        still_running = _alive(pid)

    assert last == (
        "Mirbad stopped (0 model(s) stopped: none; none left running here; still running on other nodes, "
        f"which mirbad up does not stop: {far} on gpu-2)."
    )
    assert still_running
    log = up.log()
    assert "[accepted]" not in log
    assert "connection open" not in log
