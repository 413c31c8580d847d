"""The chaos suite: faults injected into a dev fleet of real processes under streamed load.

A master (``mirbad up``, with its own agent) and two further agents on loopback, from
``tools/dev_fleet.py``'s :class:`DevFleet`, serve tiny llama-server models on the two further agents
while a few threads stream chats through the master's ``/v1``. Each scenario injects one fault by
signal, then checks the fleet's promises:

* no acknowledged registry or key change is lost (every 2xx write is there after the fault);
* never two instances of one model (counted from ``/proc``, not from what the fleet reports);
* every stream ends, complete or with an error, and none stays silent past :data:`IDLE_S`;
* every model is Ready again, and every node reachable, within :data:`RECOVERY_S`;
* crash restarts as the spec counts them: an agent's crash, a partition or the master's crash restarts
  no model (the same processes serve on, adopted); a node's new boot relaunches what it ran, no crash
  counted; a runtime's crash restarts it once, after the first backoff, without a pause.

A scenario is a function of the :class:`Chaos` context in :data:`SCENARIOS`; a new one is a few lines.
The seeds are fixed, so a failure replays; ``MIRBAD_CHAOS_SOAK=N`` runs every scenario N times more
with random seeds (printed on failure). The figures go to the run's ``chaos:`` line
(``tests/_support/chaos_report.py``).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
from tests._support.asgi_server import free_port_block
from tests._support.chaos_report import CHAOS_PROPERTY
from tests._support.polling import until
from tests._support.real_parts import llama_server_path, required_parts
from tests._support.tiny_definition import tiny_llama_definition

ROOT: Final = Path(__file__).resolve().parents[2]
IDLE_S: Final = 60.0
"""A stream silent this long counts as hung (a fault must end it, or let it finish, well before)."""
RECOVERY_S: Final = 120.0
"""The bound on a fleet's return: every node reachable and every model Ready again."""
CRASH_BACKOFF_S: Final = 10.0
"""The health monitor's wait before the first crash restart (its default)."""
SOAK_ENV: Final = "MIRBAD_CHAOS_SOAK"
MODELS: Final = {"chaos-a": "agent-2", "chaos-b": "agent-3"}
"""The models under load, by the node each runs on."""
STARTED: Final = ("chaos-c", "agent-3")
"""A model kept stopped, that a scenario starts while it kills the master (then stops again)."""

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(900), pytest.mark.long(minutes=2)]


def _dev_fleet() -> Any:
    # tools/ is a folder of commands, not a package: load the module from its file.
    spec = importlib.util.spec_from_file_location("dev_fleet", ROOT / "tools" / "dev_fleet.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("dev_fleet", module)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------------- the streamed load


@dataclass
class Load:
    """Threads that stream chats through the master's ``/v1`` until stopped, counting how each ended."""

    url: str
    headers: dict[str, str]
    seed: int
    workers: int = 2
    outcomes: Counter[str] = field(default_factory=Counter)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __enter__(self) -> Load:
        for index in range(self.workers):
            rng = random.Random(self.seed * 1000 + index)
            thread = threading.Thread(target=self._run, args=(rng,), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(IDLE_S + 30)
        alive = [thread for thread in self._threads if thread.is_alive()]
        assert not alive, f"{len(alive)} streaming thread(s) never ended"

    def _run(self, rng: random.Random) -> None:
        with httpx.Client(
            base_url=self.url,
            headers=self.headers,
            trust_env=False,
            timeout=httpx.Timeout(10.0, read=IDLE_S),
        ) as client:
            while not self._stop.is_set():
                outcome = self._stream(client, rng.choice(sorted(MODELS)), rng.randint(16, 96))
                with self._lock:
                    self.outcomes[outcome] += 1
                self._stop.wait(rng.uniform(0.02, 0.2))

    @staticmethod
    def _stream(client: httpx.Client, model: str, max_tokens: int) -> str:
        body = {
            "model": model,
            "messages": [{"role": "user", "content": "Tell me a story."}],
            "max_tokens": max_tokens,
            "stream": True,
        }
        try:
            with client.stream("POST", "/v1/chat/completions", json=body) as response:
                if not response.is_success:
                    response.read()
                    # A node down answers 5xx (the fault's doing); any other refusal is the load's bug.
                    return "refused" if response.status_code >= 500 else f"rejected {response.status_code}"
                for line in response.iter_lines():
                    if line.strip() == "data: [DONE]":
                        return "complete"
                    if line.startswith("data:") and '"error"' in line:
                        return "error"
                return "error"  # the stream closed without [DONE]: ended, not hung
        except httpx.ReadTimeout:
            return "hung"
        except httpx.HTTPError:
            return "error"


# ---------------------------------------------------------------------------------- the fleet


@dataclass
class Figures:
    """One scenario's figures for the ``chaos:`` line."""

    scenarios: int = 1
    kills: int = 0
    acknowledged_writes: int = 0
    lost_writes: int = 0
    duplicates: int = 0
    hung_streams: int = 0
    worst_recovery_s: float = 0.0


@dataclass
class Chaos:
    """What a scenario works with: the fleet, an admin client, its seed and its figures."""

    fleet: Any
    api_key: str
    rng: random.Random
    seed: int
    figures: Figures = field(default_factory=Figures)

    @property
    def url(self) -> str:
        """The master's portal, ``/api`` and ``/v1``."""
        return str(self.fleet.layout.url)

    @contextlib.contextmanager
    def admin(self, timeout_s: float = 30.0) -> Iterator[httpx.Client]:
        """An admin API client (no retries: a write either got its answer or it did not)."""
        headers = {"Authorization": f"Bearer {self.fleet.password}"}
        with httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s, trust_env=False) as client:
            yield client

    def load(self) -> Load:
        """Streamed chats through ``/v1`` for the scenario's fault."""
        headers = {"Authorization": f"Bearer {self.api_key}"}
        return Load(self.url, headers, self.seed)

    def kill(self, name: str) -> None:
        """SIGKILL one child of the fleet (``master`` or an agent) and wait until it is gone."""
        self.fleet.send_signal(name, signal.SIGKILL)
        self.figures.kills += 1
        process = self.fleet.master if name == "master" else self.fleet.agents[name]
        process.wait(30)

    def pids(self) -> dict[str, list[int]]:
        """Each model's live llama-server processes, from ``/proc``: ``--alias`` names the model, and its
        ``--port`` is one of this fleet's model ports."""
        layout = self.fleet.layout
        ports = {
            port
            for index in range(1, layout.agents + 1)
            for port in range(layout.process_ports(index)[0], layout.process_ports(index)[1] + 1)
        }
        found: dict[str, list[int]] = {model: [] for model in [*MODELS, STARTED[0]]}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError, ValueError, IndexError):
                argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
                if Path(argv[0]).name != "llama-server" or "--alias" not in argv or "--port" not in argv:
                    continue
                if int(argv[argv.index("--port") + 1]) not in ports:
                    continue
                if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                    continue  # a zombie is a process that ended
                model = argv[argv.index("--alias") + 1]
                if model in found:
                    found[model].append(int(entry.name))
        return found

    def recovered(self, since: float) -> None:
        """Wait until every node is reachable and every model Ready; record the time it took."""

        def back() -> bool:
            with contextlib.suppress(httpx.HTTPError), self.admin(10) as admin:
                nodes = admin.get("/api/nodes").json()
                views = {v["definition"]["id"]: v["status"] for v in admin.get("/api/models").json()}
                live = self.pids()
                # Ready in a process that runs: a view of a process gone is the master not yet knowing.
                return all(node["reachable"] for node in nodes) and all(
                    views.get(model, {}).get("state") == "Ready" and views[model].get("pid") in live[model]
                    for model in MODELS
                )
            return False

        until(back, lambda: f"the fleet did not recover: {self._state()}", timeout_s=RECOVERY_S, poll_s=0.5)
        self.figures.worst_recovery_s = max(self.figures.worst_recovery_s, time.monotonic() - since)

    def check_single_instances(self) -> dict[str, int]:
        """Fail on a model with more (or fewer) than one process; return each model's pid."""
        pids = {model: found for model, found in self.pids().items() if model in MODELS}
        self.figures.duplicates += sum(max(0, len(found) - 1) for found in pids.values())
        assert all(len(found) == 1 for found in pids.values()), f"instances per model: {pids}"
        return {model: found[0] for model, found in pids.items()}

    def check_streams(self, load: Load) -> None:
        """Every stream ended; some completed (the load ran), none stayed silent past the idle bound."""
        self.figures.hung_streams += load.outcomes["hung"]
        assert load.outcomes["hung"] == 0, f"hung streams: {load.outcomes}"
        assert load.outcomes["complete"] > 0, f"no stream completed: {load.outcomes}"
        rejected = {outcome: n for outcome, n in load.outcomes.items() if outcome.startswith("rejected")}
        assert not rejected, f"the load itself was refused: {load.outcomes}"

    def _state(self) -> str:
        with contextlib.suppress(httpx.HTTPError), self.admin(10) as admin:
            nodes = [(n["name"], n["reachable"]) for n in admin.get("/api/nodes").json()]
            models = [(v["definition"]["id"], v["status"]["state"]) for v in admin.get("/api/models").json()]
            return f"nodes {nodes}, models {models}"
        return "the master does not answer"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, str]]:
    """A master and two further agents, the chaos models Ready on the further agents, and an API key.

    The load uses a key of its own: once a scenario has created keys, ``/v1`` takes keys alone.
    """
    dev_fleet = _dev_fleet()
    server = llama_server_path()
    assert server is not None
    env = {**os.environ, "MIRBAD_HEALTH_POLL_S": "1"}
    if _soak() > 0:
        # A soak crashes one runtime many times within the 10 minutes that clear a crash count: the
        # spec's pause after three would end it, so the soak lifts the limit (the backoff stays).
        env["MIRBAD_CRASH_RESTART_LIMIT"] = "1000000"
    data_dir = tmp_path_factory.mktemp("chaos") / "fleet"
    port = free_port_block(200)
    fleet = dev_fleet.DevFleet(dev_fleet.FleetLayout(data_dir, port, 3, server), env=env, say=lambda *_: None)
    try:
        fleet.start()
        key = _place_models(fleet)
        Chaos(fleet, key, random.Random(0), 0).recovered(time.monotonic())
        yield fleet, key
    finally:
        fleet.stop()


def _place_models(fleet: Any) -> str:
    headers = {"Authorization": f"Bearer {fleet.password}"}
    with httpx.Client(base_url=fleet.layout.url, headers=headers, timeout=120, trust_env=False) as api:
        nodes = {node["name"]: node for node in api.get("/api/nodes").raise_for_status().json()}
        for model, node_name in [*MODELS.items(), STARTED]:
            node = nodes[node_name]
            [llamacpp] = [r for r in node["info"]["runtimes"] if r["runtime"] == "llamacpp"]
            [executable] = llamacpp["executables"]
            definition = tiny_llama_definition(
                executable, id=model, servedName=model, placement={"nodeId": node["id"]}
            )
            api.post("/api/models", json=definition).raise_for_status()
            if model in MODELS:
                api.post(f"/api/models/{model}/start").raise_for_status()
        return str(api.post("/api/keys", json={"name": "chaos load"}).raise_for_status().json()["secret"])


# ---------------------------------------------------------------------------------- the scenarios


def agent_killed_during_streams(chaos: Chaos) -> None:
    """SIGKILL an agent under streamed load, again and again: its models are adopted, not restarted."""
    with chaos.load() as load:
        for _ in range(3):
            before = chaos.check_single_instances()
            name = chaos.rng.choice(sorted(set(MODELS.values())))
            time.sleep(chaos.rng.uniform(0.5, 2.0))
            chaos.kill(name)
            time.sleep(chaos.rng.uniform(0.5, 2.0))
            since = time.monotonic()
            chaos.fleet.respawn(name)
            chaos.recovered(since)
            # An agent's crash is not a model crash: the same processes serve on, nothing restarted.
            assert chaos.check_single_instances() == before
    chaos.check_streams(load)


def agent_partitioned(chaos: Chaos) -> None:
    """SIGSTOP an agent until the master calls it unreachable, hold it a while, then SIGCONT it."""
    name = chaos.rng.choice(sorted(set(MODELS.values())))
    with chaos.load() as load:
        before = chaos.check_single_instances()
        chaos.fleet.send_signal(name, signal.SIGSTOP)
        try:

            def unreachable() -> bool:
                with chaos.admin() as admin:
                    return any(
                        n["name"] == name and not n["reachable"] for n in admin.get("/api/nodes").json()
                    )

            until(unreachable, f"{name} stopped, yet still reachable", timeout_s=RECOVERY_S, poll_s=0.5)
            time.sleep(chaos.rng.uniform(1.0, 3.0))
        finally:
            chaos.fleet.send_signal(name, signal.SIGCONT)
        chaos.recovered(time.monotonic())
        assert chaos.check_single_instances() == before
    chaos.check_streams(load)


def master_killed_during_writes(chaos: Chaos) -> None:
    """SIGKILL the master while model definitions and keys are written and a model starts."""
    acknowledged: dict[str, set[str]] = {"models": set(), "keys": set()}
    stop, first = threading.Event(), threading.Event()
    prefix = f"w{chaos.seed}-{secrets.token_hex(2)}"

    def write() -> None:
        executable = _executable(chaos)
        with chaos.admin() as admin:
            for index in range(10_000):
                if stop.is_set():
                    return
                model = f"{prefix}-{index}"
                with contextlib.suppress(httpx.HTTPError):
                    if admin.post("/api/models", json=tiny_llama_definition(executable, id=model)).is_success:
                        acknowledged["models"].add(model)
                        first.set()
                    key = admin.post("/api/keys", json={"name": model})
                    if key.is_success:
                        acknowledged["keys"].add(key.json()["id"])
                    continue
                return  # the master is gone

    started: list[bool] = []
    start_after = chaos.rng.uniform(0.0, 1.0)  # drawn here: the seed's draws stay in one order

    def start() -> None:
        time.sleep(start_after)
        with contextlib.suppress(httpx.HTTPError), chaos.admin(120) as admin:
            started.append(admin.post(f"/api/models/{STARTED[0]}/start").is_success)

    with chaos.load() as load:
        writer, starter = threading.Thread(target=write, daemon=True), threading.Thread(target=start)
        writer.start()
        starter.start()
        # The kill falls among the writes however slow a loaded machine makes the first one.
        assert first.wait(60), "no write was acknowledged within 60 s"
        time.sleep(chaos.rng.uniform(0.2, 2.0))
        chaos.kill("master")
        for thread in (writer, starter):
            thread.join(60)
            assert not thread.is_alive()
        stop.set()
        since = time.monotonic()
        chaos.fleet.respawn("master")
        chaos.recovered(since)
        with chaos.admin() as admin:
            models = {view["definition"]["id"] for view in admin.get("/api/models").json()}
            keys = {key["id"] for key in admin.get("/api/keys").json()}
        lost = (acknowledged["models"] - models) | (acknowledged["keys"] - keys)
        chaos.figures.acknowledged_writes += len(acknowledged["models"]) + len(acknowledged["keys"])
        chaos.figures.acknowledged_writes += sum(started)
        chaos.figures.lost_writes += len(lost)
        assert not lost, f"acknowledged, then lost: {sorted(lost)}"
        assert acknowledged["models"], "no write was acknowledged before the kill"
        chaos.check_single_instances()
        _check_started(chaos, acknowledged=any(started))
    chaos.check_streams(load)


def _check_started(chaos: Chaos, *, acknowledged: bool) -> None:
    """An acknowledged start ends Ready, any start in one process at most; then it is stopped again."""
    model = STARTED[0]

    def settled() -> str | None:
        with chaos.admin() as admin:
            state = str(admin.get(f"/api/models/{model}").json()["status"]["state"])
        return None if state == "Starting" or (acknowledged and state != "Ready") else state

    until(settled, f"{model} did not settle after the master's kill", timeout_s=RECOVERY_S, poll_s=0.5)
    instances = len(chaos.pids()[model])
    chaos.figures.duplicates += max(0, instances - 1)
    assert instances <= 1, f"{model} runs {instances} times"
    if acknowledged:
        chaos.figures.lost_writes += int(instances == 0)
        assert instances == 1, f"{model}'s start was acknowledged, yet it does not run"
    with chaos.admin(120) as admin:
        admin.post(f"/api/models/{model}/stop").raise_for_status()
    until(lambda: not chaos.pids()[model], f"{model} did not stop", timeout_s=RECOVERY_S, poll_s=0.5)


def node_rebooted(chaos: Chaos) -> None:
    """An agent's host loses power (agent and models SIGKILLed) and comes back with a new boot id.

    The new boot is the kernel's boot id file bind-mounted over in a mount namespace of the agent's
    own (``unshare``, as root). The master must relaunch the models the node ran, each once, and count
    none of it as a crash.
    """
    name = chaos.rng.choice(sorted(set(MODELS.values())))
    if (why := _no_fake_boot()) is not None:
        if "chaos" in required_parts():
            pytest.fail(f"MIRBAD_REQUIRE names chaos: {why}", pytrace=False)
        pytest.skip(why)
    on_node = [model for model, node in MODELS.items() if node == name]
    with chaos.load() as load:
        before = chaos.check_single_instances()
        chaos.kill(name)
        for model in on_node:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(os.getpgid(before[model]), signal.SIGKILL)
        until(
            lambda: not any(chaos.pids()[m] for m in on_node),
            "the models outlived the power loss",
            timeout_s=30,
        )
        boot = chaos.fleet.layout.data_dir / f"{name}-boot-id-{chaos.seed}"
        boot.write_text(f"{uuid.UUID(int=chaos.rng.getrandbits(128))}\n")
        since = time.monotonic()
        chaos.fleet.respawn(name, _with_boot_id(boot))
        chaos.recovered(since)
        after = chaos.check_single_instances()
        assert all(after[model] != before[model] for model in on_node), "no model was relaunched"
        with chaos.admin() as admin:
            pauses = [
                view["definition"]["id"] for view in admin.get("/api/models").json() if view.get("pause")
            ]
        assert not pauses, f"a reboot counted as crashes: {pauses}"
    chaos.check_streams(load)


def runtime_crashed(chaos: Chaos) -> None:
    """SIGKILL a model's llama-server: one crash restart, after the first backoff, and no pause."""
    model = chaos.rng.choice(sorted(MODELS))
    with chaos.load() as load:
        before = chaos.check_single_instances()
        os.kill(before[model], signal.SIGKILL)
        chaos.figures.kills += 1
        since = time.monotonic()
        chaos.recovered(since)
        took = time.monotonic() - since
        after = chaos.check_single_instances()
        assert after[model] != before[model], f"{model} was not restarted"
        assert all(after[other] == before[other] for other in MODELS if other != model)
        # The spec's first crash backoff: a restart sooner would be a restart loop in the making.
        assert took >= CRASH_BACKOFF_S, f"{model} came back after {took:.1f} s"
        with chaos.admin() as admin:
            assert admin.get(f"/api/models/{model}").json().get("pause") is None, "one crash paused restarts"
    chaos.check_streams(load)


def _with_boot_id(path: Path) -> list[str]:
    script = 'mount --bind "$0" /proc/sys/kernel/random/boot_id && exec "$@"'
    return ["unshare", "--mount", "--", "sh", "-c", script, str(path)]


@functools.cache
def _no_fake_boot() -> str | None:
    """Why a child cannot be given a boot id of its own here, or None."""
    probe = Path(tempfile.mkdtemp()) / "boot_id"
    probe.write_text("chaos\n")
    try:
        done = subprocess.run(
            [*_with_boot_id(probe), "cat", "/proc/sys/kernel/random/boot_id"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except OSError as exc:
        return f"unshare cannot run: {exc}"
    finally:
        shutil.rmtree(probe.parent, ignore_errors=True)
    if done.stdout != "chaos\n":
        return f"a new boot id needs unshare and a bind mount (root): {done.stderr.strip()}"
    return None


def _executable(chaos: Chaos) -> dict[str, Any]:
    with chaos.admin() as admin:
        [node] = [n for n in admin.get("/api/nodes").json() if n["name"] == MODELS["chaos-a"]]
    [llamacpp] = [r for r in node["info"]["runtimes"] if r["runtime"] == "llamacpp"]
    return dict(llamacpp["executables"][0])


SCENARIOS: Final[dict[str, Callable[[Chaos], None]]] = {
    "agent-killed-during-streams": agent_killed_during_streams,
    "agent-partitioned": agent_partitioned,
    "master-killed-during-writes": master_killed_during_writes,
    "node-rebooted": node_rebooted,
    "runtime-crashed": runtime_crashed,
}
"""Each scenario by name; its seed is fixed (the soak adds random ones)."""


def _soak() -> int:
    """How many more rounds of every scenario the soak asks for (0: none)."""
    return int(os.environ.get(SOAK_ENV, "0") or "0")


def _runs() -> list[Any]:
    runs = [pytest.param(name, seed, id=f"{name}-seed{seed}") for seed, name in enumerate(SCENARIOS, 1)]
    seeds = random.SystemRandom()
    for _ in range(_soak()):
        for name in SCENARIOS:
            seed = seeds.randrange(1, 2**31)
            runs.append(pytest.param(name, seed, id=f"{name}-soak{seed}"))
    return runs


@pytest.mark.parametrize(("scenario", "seed"), _runs())
def test_chaos(fleet: tuple[Any, str], scenario: str, seed: int, request: pytest.FixtureRequest) -> None:
    chaos = Chaos(*fleet, random.Random(seed), seed)
    try:
        SCENARIOS[scenario](chaos)
    finally:
        request.node.user_properties.append((CHAOS_PROPERTY, json.loads(json.dumps(vars(chaos.figures)))))
