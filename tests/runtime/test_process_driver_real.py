"""The process driver with a real llama-server serving the tiny GGUF: start, adopt, crash, stop."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as settings_of_hypothesis
from hypothesis import strategies as st
from tests._support import process_driver_child
from tests._support.asgi_server import free_port
from tests._support.polling import wait_for_state
from tests._support.process_driver_child import driver_from
from tests._support.processes import kill_recorded_processes, llama_servers_on, write_exec_wrapper
from tests._support.real_parts import llama_server_path
from tests._support.tiny_gguf import TINY_MODEL_PATH

from mirbad_protocol import ExecutableRef, GpuSelection, ModelState, ProcessLaunch
from mirbad_runtime import GpuOwner, ProcessDriver, ProcessRecord, sha256_of_file
from mirbad_runtime._process_host_posix import linux_identity

pytestmark = [
    pytest.mark.llamacpp,
    pytest.mark.anyio,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="checks processes through /proc"),
]

WAIT_S = 60


@pytest.fixture
def settings(tmp_path: Path, model_root: Path) -> Iterator[dict[str, Any]]:
    """What a driver (here or in a child agent) is built from; every recorded model is killed after."""
    server = llama_server_path()
    assert server is not None
    start = free_port()
    spec = ProcessLaunch(
        model_id="tiny",
        served_name="tiny-chat",
        runtime="llamacpp",
        argv=["--model", TINY_MODEL_PATH, "--alias", "tiny-chat", "--ctx-size", "256", "--threads", "1"],
        model_path=TINY_MODEL_PATH,
        budget_gib=0.5,
        config_hash="0123456789abcdef",
        executable=ExecutableRef(name="llama-server", version="test"),
    )
    values = {
        "state_dir": str(tmp_path / "state"),
        "model_root": str(model_root),
        "port_range_start": start,
        "port_range_end": min(start + 20, 65535),
        "executable": {
            "name": "llama-server",
            "version": "test",
            "path": str(server),
            "sha256": sha256_of_file(server),
        },
        "spec": spec.model_dump(mode="json", by_alias=True),
    }
    yield values
    kill_recorded_processes(tmp_path / "state" / "processes.json")


@pytest.fixture
def spec(settings: dict[str, Any]) -> ProcessLaunch:
    return ProcessLaunch.model_validate(settings["spec"])


@pytest.fixture
async def driver(settings: dict[str, Any]) -> AsyncIterator[ProcessDriver]:
    async with driver_from(settings) as driver:
        yield driver


_wait_for = partial(wait_for_state, timeout_s=WAIT_S)


async def _only_record(driver: ProcessDriver) -> ProcessRecord:
    [record] = await driver.records.all()
    return record


async def _chat(driver: ProcessDriver, model_id: str, *, with_key: bool = True) -> httpx.Response:
    upstream = await driver.upstream_url(model_id)
    headers = await driver.upstream_headers(model_id) if with_key else {}
    body = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}
    async with httpx.AsyncClient(trust_env=False, timeout=30) as http:
        return await http.post(upstream + "v1/chat/completions", json=body, headers=headers)


async def test_start_serves_with_its_instance_key_until_stop(
    driver: ProcessDriver, spec: ProcessLaunch, settings: dict[str, Any], model_root: Path
) -> None:
    first = await driver.start(spec)
    ready = await _wait_for(driver, spec.model_id, ModelState.READY)
    record = await _only_record(driver)
    key = (await driver.upstream_headers(spec.model_id))["Authorization"].removeprefix("Bearer ")
    answer = await _chat(driver, spec.model_id)
    refused = await _chat(driver, spec.model_id, with_key=False)
    proc = Path(f"/proc/{record.pid}")
    cmdline = proc.joinpath("cmdline").read_bytes().split(b"\0")
    environ = proc.joinpath("environ").read_bytes().split(b"\0")
    cwd = os.readlink(proc / "cwd")
    session = os.getsid(record.pid)
    logs = await driver.logs(spec.model_id, tail=50)

    await driver.stop(spec.model_id)

    assert first.state in (ModelState.STARTING, ModelState.READY)
    assert (ready.served_name, ready.runtime, ready.port, ready.config_hash, ready.budget_gib) == (
        "tiny-chat",
        "llamacpp",
        settings["port_range_start"],
        spec.config_hash,
        0.5,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["role"] == "assistant"
    assert refused.status_code == 401
    assert len(key) == 43
    assert not any(key.encode() in argument for argument in cmdline)
    assert f"LLAMA_API_KEY={key}".encode() in environ
    assert cmdline[-5:-1] == [b"--host", b"127.0.0.1", b"--port", str(ready.port).encode()]
    assert cwd == str(await anyio.Path(model_root).resolve())
    assert session == record.pid
    assert logs
    assert (await driver.status(spec.model_id)).state is ModelState.STOPPED
    assert linux_identity(record.pid) is None
    assert await driver.records.all() == []
    assert not (Path(settings["state_dir"]) / "keys" / "tiny.key").exists()


async def test_a_new_driver_adopts_the_running_model_without_a_second_process(
    driver: ProcessDriver, spec: ProcessLaunch, settings: dict[str, Any]
) -> None:
    await driver.start(spec)
    await _wait_for(driver, spec.model_id, ModelState.READY)
    original = await _only_record(driver)
    await driver.aclose()  # the first agent is gone; its model is not

    async with driver_from(settings) as successor:
        adopted = await successor.adopt()
        again = await successor.start(spec)
        answer = await _chat(successor, spec.model_id)
        record = await _only_record(successor)
        servers = llama_servers_on(original.port)
        await successor.stop(spec.model_id)

    assert [(status.id, status.state) for status in adopted] == [("tiny", ModelState.READY)]
    assert again.state is ModelState.READY
    assert record == original
    assert servers == [original.pid]
    assert answer.status_code == 200, answer.text
    assert linux_identity(original.pid) is None


async def test_a_real_llama_server_on_chosen_gpus_gets_them_and_a_successor_reads_them_back(
    driver: ProcessDriver, spec: ProcessLaunch, settings: dict[str, Any]
) -> None:
    # This llama-server is a CPU build and the machine has no GPU: what is checked is the environment
    # the real process runs with, and that the next agent reads the choice back from the record.
    placed = GpuSelection(mode="uuids", uuids=["GPU-1", "GPU-3"])
    await driver.start(spec.model_copy(update={"gpus": placed}))
    await _wait_for(driver, spec.model_id, ModelState.READY)
    record = await _only_record(driver)
    environ = (await anyio.Path(f"/proc/{record.pid}/environ").read_bytes()).split(b"\0")
    await driver.aclose()

    async with driver_from(settings) as successor:
        adopted = {status.id: status for status in await successor.adopt()}
        await successor.stop(spec.model_id)

    assert b"CUDA_VISIBLE_DEVICES=GPU-1,GPU-3" in environ
    assert adopted[spec.model_id].state is ModelState.READY
    assert adopted[spec.model_id].gpus == placed


async def test_the_model_outlives_a_killed_agent_and_the_next_agent_adopts_it(
    spec: ProcessLaunch, settings: dict[str, Any]
) -> None:
    agent = await anyio.open_process([sys.executable, process_driver_child.__file__, json.dumps(settings)])
    try:
        assert agent.stdout is not None
        with anyio.fail_after(WAIT_S):
            line = (await agent.stdout.receive()).decode().strip()
    finally:
        agent.kill()  # SIGKILL: the agent gets no chance to clean up
        with anyio.fail_after(WAIT_S):
            await agent.wait()
        await agent.aclose()
    pid = int(line.removeprefix("READY "))

    async with driver_from(settings) as successor:
        serving = await _chat(successor, spec.model_id)
        adopted = await successor.adopt()
        record = await _only_record(successor)
        await successor.stop(spec.model_id)

    assert agent.returncode == -signal.SIGKILL
    assert serving.status_code == 200, serving.text
    assert [(status.id, status.state) for status in adopted] == [("tiny", ModelState.READY)]
    assert record.pid == pid
    assert linux_identity(pid) is None


async def test_a_killed_model_is_failed_with_its_log_tail_and_starts_again(
    driver: ProcessDriver, spec: ProcessLaunch
) -> None:
    await driver.start(spec)
    await _wait_for(driver, spec.model_id, ModelState.READY)
    crashed = await _only_record(driver)

    os.kill(crashed.pid, signal.SIGKILL)
    failed = await _wait_for(driver, spec.model_id, ModelState.FAILED)
    tail = await driver.logs(spec.model_id, tail=20)
    with anyio.fail_after(WAIT_S):
        followed = [line async for line in driver.follow_logs(spec.model_id, tail=3)]
    listed = await driver.list_statuses()

    await driver.start(spec)
    restarted = await _wait_for(driver, spec.model_id, ModelState.READY)
    replacement = await _only_record(driver)
    await driver.stop(spec.model_id)

    assert failed.error is not None
    headline, *lines = failed.error.split("\n")
    assert headline == f"the process exited with code {-signal.SIGKILL}"
    assert lines == tail
    assert 0 < len(lines) <= 20
    assert followed == tail[-3:]
    assert [status.state for status in listed] == [ModelState.FAILED]
    assert restarted.port == crashed.port
    assert replacement.pid != crashed.pid


async def test_follow_logs_streams_what_the_model_writes(driver: ProcessDriver, spec: ProcessLaunch) -> None:
    await driver.start(spec)
    await _wait_for(driver, spec.model_id, ModelState.READY)
    seen: list[str] = []

    async def follow() -> None:
        async with contextlib.aclosing(driver.follow_logs(spec.model_id)) as lines:
            async for line in lines:
                seen.append(line)
                if "print_timing" in line:
                    return

    with anyio.fail_after(WAIT_S):
        async with anyio.create_task_group() as group:
            group.start_soon(follow)
            await anyio.sleep(0.2)
            assert (await _chat(driver, spec.model_id)).status_code == 200
    await driver.stop(spec.model_id)

    assert any("print_timing" in line for line in seen)


async def test_a_running_model_reports_its_resident_set(driver: ProcessDriver, spec: ProcessLaunch) -> None:
    await driver.start(spec)
    await _wait_for(driver, spec.model_id, ModelState.READY)
    measured = await driver.memory_bytes(spec.model_id)
    owner = await driver.gpu_owner(spec.model_id)
    record = await driver.records.get(spec.model_id)
    await driver.stop(spec.model_id)

    # llama-server with the tiny model holds a few MiB at least (its libraries alone).
    assert measured is not None
    assert measured > 1024**2
    assert await driver.memory_bytes(spec.model_id) is None
    # Its GPU processes are found by the server's pid (and the processes below it).
    assert record is not None
    assert owner == GpuOwner(pid=record.pid)
    assert await driver.gpu_owner(spec.model_id) is None


def _wrapped(settings: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    """``settings`` with llama-server catalogued as a ``#!/bin/sh`` wrapper that ``exec``s the binary."""
    wrapper = write_exec_wrapper(tmp_path / "bin" / "llama-server", settings["executable"]["path"])
    executable = {**settings["executable"], "path": str(wrapper), "sha256": sha256_of_file(wrapper)}
    return {**settings, "executable": executable}


async def test_a_wrapper_script_that_execs_llama_server_is_ready_and_started_once(
    settings: dict[str, Any], spec: ProcessLaunch, tmp_path: Path
) -> None:
    async with driver_from(_wrapped(settings, tmp_path)) as driver:
        await driver.start(spec)
        ready = await _wait_for(driver, spec.model_id, ModelState.READY)
        record = await _only_record(driver)
        again = await driver.start(spec)  # a crash restart's question: it must launch nothing
        assert ready.port is not None
        servers = llama_servers_on(ready.port)
        await driver.stop(spec.model_id)

    assert again.state is ModelState.READY
    assert servers == [record.pid]
    assert linux_identity(record.pid) is None
    assert llama_servers_on(ready.port) == []


_REAL_STEPS = st.lists(st.sampled_from(["start", "crash", "stop"]), min_size=1, max_size=4)


@settings_of_hypothesis(
    max_examples=3,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=_REAL_STEPS)
async def test_at_most_one_real_llama_server_per_model_at_every_step(
    settings: dict[str, Any], spec: ProcessLaunch, tmp_path: Path, steps: list[str]
) -> None:
    """Few examples of start/crash/restart/stop on the real server (each costs a launch or two)."""
    async with driver_from(_wrapped(settings, tmp_path)) as driver:
        for step in steps:
            record = await driver.records.get(spec.model_id)
            if step == "start":
                status = await driver.start(spec)
                await _wait_for(driver, spec.model_id, ModelState.READY)
            elif step == "stop":
                await driver.stop(spec.model_id)
            elif record is not None and linux_identity(record.pid) is not None:
                os.kill(record.pid, signal.SIGKILL)
                await _wait_for(driver, spec.model_id, ModelState.FAILED)
            status = await driver.status(spec.model_id)
            running = llama_servers_on(status.port) if status.port is not None else []
            assert len(running) <= 1, (step, running)
        await driver.stop(spec.model_id)
        assert await driver.records.all() == []
