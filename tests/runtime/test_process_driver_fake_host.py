"""The process driver over the fake process table: identity through an ``exec``, never two instances.

The operating system is played by :class:`~mirbad_runtime.testing.FakeProcessHost`, so a wrapper's
``exec``, a leader that dies and leaves its child in the group, and crashes are steps a test takes.
Nothing listens on the models' ports, so a running model reads Starting, never Ready.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests._support.asgi_server import free_port

from mirbad_protocol import ExecutableRef, GpuSelection, ModelState, ProcessLaunch
from mirbad_runtime import (
    CatalogedExecutable,
    ExecutableCatalog,
    FileInstanceKeyProtector,
    ProcessDriver,
    ProcessDriverConfig,
    ProcessIdentity,
)
from mirbad_runtime.exceptions import RuntimeUnavailableError
from mirbad_runtime.testing import FakeProcessHost

MODEL = "m/model.bin"
MODELS = ("a", "b")


def _workspace(root: Path) -> Path:
    (root / "models" / "m").mkdir(parents=True)
    (root / "models" / MODEL).write_bytes(b"weights")
    wrapper = root / "bin" / "llama-server"
    wrapper.parent.mkdir()
    wrapper.write_text('#!/bin/sh\nexec /opt/llama/bin/llama-server "$@"\n')
    wrapper.chmod(0o755)
    return root


def _driver(root: Path, host: FakeProcessHost) -> ProcessDriver:
    wrapper = root / "bin" / "llama-server"
    entry = CatalogedExecutable(
        name="llama-server",
        version="1",
        path=wrapper,
        sha256=hashlib.sha256(wrapper.read_bytes()).hexdigest(),
    )
    start = free_port()
    config = ProcessDriverConfig(
        state_dir=root / "state",
        model_roots=(root / "models",),
        port_range_start=start,
        port_range_end=min(start + 20, 65535),
        stop_timeout_s=1.0,
        kill_timeout_s=1.0,
        health_timeout_s=0.5,
        poll_interval_s=0.01,
    )
    return ProcessDriver(
        config,
        host=host,
        catalog=ExecutableCatalog([entry]),
        keys=FileInstanceKeyProtector(root / "state" / "keys"),
    )


def _spec(model_id: str, **changes: Any) -> ProcessLaunch:
    fields: dict[str, Any] = {
        "model_id": model_id,
        "served_name": f"{model_id}-served",
        "runtime": "llamacpp",
        "argv": ["--model", MODEL],
        "model_path": MODEL,
        "budget_gib": 1.0,
        "config_hash": "0123456789abcdef",
        "executable": ExecutableRef(name="llama-server", version="1"),
        **changes,
    }
    return ProcessLaunch(**fields)


def _running_of(host: FakeProcessHost, model_id: str) -> list[int]:
    return [p.pid for p in host.running() if p.log_path.name == f"{model_id}.log"]


@pytest.mark.anyio
async def test_a_wrapper_that_execs_stays_tracked_and_is_not_started_twice(tmp_path: Path) -> None:
    host = FakeProcessHost()
    async with _driver(_workspace(tmp_path), host) as driver:
        first = await driver.start(_spec("a"))
        [pid] = _running_of(host, "a")
        host.exec_image(pid, "/opt/llama/bin/llama-server")

        assert first.state is ModelState.STARTING
        assert (await driver.status("a")).state is ModelState.STARTING
        await driver.start(_spec("a"))  # what a crash restart would ask: it must launch nothing
        assert _running_of(host, "a") == [pid]
        await driver.stop("a")

    assert _running_of(host, "a") == []


@pytest.mark.anyio
async def test_what_lingers_of_a_dead_wrapper_is_stopped_before_a_new_start(tmp_path: Path) -> None:
    host = FakeProcessHost()
    async with _driver(_workspace(tmp_path), host) as driver:
        await driver.start(_spec("a"))
        [wrapper] = _running_of(host, "a")
        server = host.fork(wrapper)
        host.crash(wrapper)

        failed = await driver.status("a")
        assert failed.state is ModelState.FAILED
        assert failed.error is not None
        assert "still runs" in failed.error
        await driver.start(_spec("a"))

        [restarted] = _running_of(host, "a")
        assert restarted not in (wrapper, server)
        assert host.processes[server].exit_code == -15


_STEPS = st.lists(
    st.tuples(
        st.sampled_from(["start", "crash", "crash-leaving-child", "exec", "stop", "new-agent"]),
        st.sampled_from(MODELS),
    ),
    min_size=1,
    max_size=12,
)


async def _play(root: Path, steps: list[tuple[str, str]]) -> None:
    host = FakeProcessHost()
    driver = _driver(root, host)
    try:
        for action, model_id in steps:
            record = await driver.records.get(model_id)
            if action == "start":
                await driver.start(_spec(model_id))
            elif action == "stop":
                await driver.stop(model_id)
            elif action == "new-agent":
                await driver.aclose()
                driver = _driver(root, host)
                await driver.adopt()
            elif record is not None and host.processes[record.pid].running:
                if action == "exec":
                    host.exec_image(record.pid, "/opt/llama/bin/llama-server")
                    assert (await driver.status(model_id)).state is not ModelState.FAILED
                else:
                    if action == "crash-leaving-child":
                        host.fork(record.pid)
                    host.crash(record.pid)
            for model in MODELS:
                assert len(_running_of(host, model)) <= 1, (action, model_id, host.running())
        for model in MODELS:
            await driver.stop(model)
        assert host.running() == []
    finally:
        await driver.aclose()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=_STEPS)
def test_at_most_one_live_process_per_model_at_every_step(steps: list[tuple[str, str]]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        anyio.run(_play, _workspace(Path(folder)), steps)


class SilentHost(FakeProcessHost):
    """A process host that stops answering when told to, as a wedged process table would."""

    def __init__(self) -> None:
        super().__init__()
        self.answering = True

    def is_alive(self, identity: ProcessIdentity) -> bool:
        if not self.answering:
            raise RuntimeUnavailableError("the process host did not answer")
        return super().is_alive(identity)


@pytest.mark.anyio
async def test_a_host_failing_during_a_listing_raises_the_documented_error_itself(tmp_path: Path) -> None:
    host = SilentHost()
    async with _driver(_workspace(tmp_path), host) as driver:
        await driver.start(_spec("a"))
        await driver.start(_spec("b"))
        host.answering = False
        with pytest.raises(RuntimeUnavailableError, match="did not answer"):
            await driver.list_statuses()
        host.answering = True
        await driver.stop("a")
        await driver.stop("b")


@pytest.mark.anyio
async def test_a_process_runs_on_its_gpus_and_a_new_driver_reads_them_back(tmp_path: Path) -> None:
    host = FakeProcessHost()
    root = _workspace(tmp_path)
    placed = GpuSelection(mode="uuids", uuids=["GPU-1", "GPU-3"])
    async with _driver(root, host) as driver:
        await driver.start(_spec("a", gpus=placed))
        await driver.start(_spec("b"))
    async with _driver(root, host) as restarted_agent:
        adopted = {status.id: status for status in await restarted_agent.adopt()}
        for model_id in MODELS:
            await restarted_agent.stop(model_id)

    [spawned_a] = [p for p in host.processes.values() if p.log_path.name == "a.log"]
    [spawned_b] = [p for p in host.processes.values() if p.log_path.name == "b.log"]
    assert spawned_a.env["CUDA_VISIBLE_DEVICES"] == "GPU-1,GPU-3"
    # A model on all GPUs gets the agent's own CUDA_VISIBLE_DEVICES (if any), not one of the driver's.
    assert spawned_b.env.get("CUDA_VISIBLE_DEVICES") == os.environ.get("CUDA_VISIBLE_DEVICES")
    assert (adopted["a"].gpus, adopted["b"].gpus) == (placed, None)
