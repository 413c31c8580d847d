"""The process driver's state machine against a stand-in server: no llama-server needed."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from tests._support.asgi_server import free_port_block
from tests._support.polling import wait_for_state
from tests._support.processes import kill_recorded_processes
from tests.fakes import fake_model_server

from mirbad_protocol import ContainerLaunch, ExecutableRef, ModelState, ProcessLaunch
from mirbad_runtime import (
    CatalogedExecutable,
    ExecutableCatalog,
    FileInstanceKeyProtector,
    PosixProcessHost,
    ProcessDriver,
    ProcessDriverConfig,
    ProcessRecord,
    _process_records,
)
from mirbad_runtime._ports import loopback_port_free
from mirbad_runtime._process_driver import lost_its_port
from mirbad_runtime._process_host_posix import linux_identity
from mirbad_runtime.exceptions import (
    LaunchRejectedError,
    ModelNotFoundError,
    ModelPathRejectedError,
    StateWriteError,
    UnknownExecutableError,
)

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="checks processes through /proc"),
]

WAIT_S = 30
MODEL = "m/model.bin"


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Path]:
    """A model root, a state folder and the stand-in executable; recorded processes die after."""
    (tmp_path / "models" / "m").mkdir(parents=True)
    (tmp_path / "models" / MODEL).write_bytes(b"weights")
    script = tmp_path / "bin" / "fake-server"
    script.parent.mkdir()
    launcher = f"import runpy\nrunpy.run_path({fake_model_server.__file__!r}, run_name='__main__')\n"
    script.write_text(f"#!{sys.executable}\n{launcher}")
    script.chmod(0o755)
    yield tmp_path
    kill_recorded_processes(tmp_path / "state" / "processes.json")


def _config(workspace: Path, **changes: Any) -> ProcessDriverConfig:
    start = free_port_block(21)  # outside the ephemeral range: no outgoing connection takes one of them
    fields: dict[str, Any] = {
        "state_dir": workspace / "state",
        "model_roots": (workspace / "models",),
        "port_range_start": start,
        "port_range_end": min(start + 20, 65535),
        "stop_timeout_s": 5.0,
        "poll_interval_s": 0.02,
        **changes,
    }
    return ProcessDriverConfig(**fields)


def _driver(workspace: Path, config: ProcessDriverConfig | None = None) -> ProcessDriver:
    script = workspace / "bin" / "fake-server"
    entry = CatalogedExecutable(
        name="fake-server", version="1", path=script, sha256=hashlib.sha256(script.read_bytes()).hexdigest()
    )
    return ProcessDriver(
        config or _config(workspace),
        host=PosixProcessHost(),
        catalog=ExecutableCatalog([entry]),
        keys=FileInstanceKeyProtector(workspace / "state" / "keys"),
    )


@pytest.fixture
async def driver(workspace: Path) -> AsyncIterator[ProcessDriver]:
    async with _driver(workspace) as driver:
        yield driver


def _spec(model_id: str = "fake", **changes: Any) -> ProcessLaunch:
    fields: dict[str, Any] = {
        "model_id": model_id,
        "served_name": f"{model_id}-served",
        "runtime": "llamacpp",
        "argv": ["--model", MODEL],
        "model_path": MODEL,
        "budget_gib": 2.0,
        "config_hash": "0123456789abcdef",
        "executable": ExecutableRef(name="fake-server", version="1"),
        **changes,
    }
    return ProcessLaunch(**fields)


_wait_for = partial(wait_for_state, timeout_s=WAIT_S, poll_s=0.02)


async def _record(driver: ProcessDriver, model_id: str = "fake") -> ProcessRecord:
    record = await driver.records.get(model_id)
    assert record is not None
    return record


async def test_the_status_carries_the_command_line_without_the_executable(driver: ProcessDriver) -> None:
    started = await driver.start(_spec())
    record = await _record(driver)

    assert started.argv == record.argv[1:]
    assert started.argv is not None
    assert started.argv[:2] == ["--model", MODEL]
    assert "--port" in started.argv


async def test_starting_while_health_says_loading_then_ready(driver: ProcessDriver) -> None:
    first = await driver.start(_spec(env={"FAKE_LOAD_S": "1"}))
    ready = await _wait_for(driver, "fake", ModelState.READY)

    assert first.state is ModelState.STARTING
    assert (ready.served_name, ready.budget_gib, ready.config_hash) == (
        "fake-served",
        2.0,
        "0123456789abcdef",
    )
    assert ready.started_at is not None
    assert ready.started_at <= datetime.now(UTC)


async def test_the_instance_key_guards_the_upstream(driver: ProcessDriver) -> None:
    await driver.start(_spec())
    await _wait_for(driver, "fake", ModelState.READY)
    upstream = await driver.upstream_url("fake")
    headers = await driver.upstream_headers("fake")

    async with httpx.AsyncClient(trust_env=False, timeout=10) as http:
        with_key = await http.get(upstream + "v1/models", headers=headers)
        without = await http.get(upstream + "v1/models")

    assert upstream == f"http://127.0.0.1:{driver.config.port_range_start}/"
    assert (with_key.status_code, without.status_code) == (200, 401)


async def test_a_runtime_without_a_key_variable_gets_no_key(driver: ProcessDriver, workspace: Path) -> None:
    await driver.start(_spec(runtime="mlx"))
    await _wait_for(driver, "fake", ModelState.READY)
    record = await _record(driver)
    environ = await anyio.Path(f"/proc/{record.pid}/environ").read_bytes()

    assert await driver.upstream_headers("fake") == {}
    assert b"LLAMA_API_KEY=" not in environ
    assert not (workspace / "state" / "keys" / "fake.key").exists()


async def test_starting_a_running_model_launches_nothing(driver: ProcessDriver) -> None:
    await driver.start(_spec())
    first = await _record(driver)

    again = await driver.start(_spec())

    assert await _record(driver) == first
    assert again.state in (ModelState.STARTING, ModelState.READY)


async def test_models_take_the_lowest_free_ports(driver: ProcessDriver) -> None:
    start = driver.config.port_range_start
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", start + 1))
        squatter.listen()
        await driver.start(_spec("one"))
        await driver.start(_spec("two"))

    assert [(await _record(driver, name)).port for name in ("one", "two")] == [start, start + 2]


async def test_a_process_that_dies_at_once_is_failed_with_its_output(driver: ProcessDriver) -> None:
    await driver.start(_spec(env={"FAKE_EXIT_CODE": "3"}))

    failed = await _wait_for(driver, "fake", ModelState.FAILED)

    assert failed.error == "the process exited with code 3\nfatal: cannot load the model"


async def test_a_port_taken_before_the_model_binds_it_is_launched_again_on_another(
    driver: ProcessDriver, workspace: Path
) -> None:
    go, starts = workspace / "bind-now", workspace / "starts"
    first = await driver.start(_spec(env={"FAKE_BIND_AFTER": str(go), "FAKE_STARTS_FILE": str(starts)}))
    assert first.port is not None
    with socket.socket() as other_program:
        other_program.bind(("127.0.0.1", first.port))
        other_program.listen()
        go.touch()

        ready = await _wait_for(driver, "fake", ModelState.READY)

    assert ready.port != first.port
    assert starts.read_text().split() == [str(first.port), str(ready.port)]


async def test_a_port_lost_again_and_again_ends_failed_after_the_retries(
    driver: ProcessDriver, workspace: Path
) -> None:
    go, starts = workspace / "bind-now", workspace / "starts"
    env = {"FAKE_BIND_AFTER": str(go), "FAKE_STARTS_FILE": str(starts)}
    with contextlib.ExitStack() as others:
        # Every port of the range is taken the moment the model would bind it.
        first = await driver.start(_spec(env=env))
        assert first.port is not None
        config = driver.config
        for port in range(config.port_range_start, config.port_range_end + 1):
            if port == first.port or loopback_port_free(port):
                taker = others.enter_context(socket.socket())
                taker.bind(("127.0.0.1", port))
                taker.listen()
        go.touch()
        with anyio.fail_after(WAIT_S):
            while True:
                status = await driver.status("fake")
                if status.state is ModelState.FAILED:
                    break
                await anyio.sleep(0.02)

    # One launch; the relaunches find no free port and the model stays Failed with the cause.
    assert "address already in use" in (status.error or "").lower()
    assert len(starts.read_text().split()) == 1


def test_only_a_taken_port_reads_as_a_lost_port() -> None:
    assert lost_its_port("the process exited with code 1\nE srv start: couldn't bind HTTP server socket")
    assert lost_its_port("OSError: [Errno 98] Address already in use")
    assert not lost_its_port("the process exited with code 3\nfatal: cannot load the model")
    assert not lost_its_port(None)


async def test_stop_kills_a_model_that_ignores_sigterm(workspace: Path) -> None:
    config = _config(workspace, stop_timeout_s=0.5)
    async with _driver(workspace, config) as driver:
        await driver.start(_spec(env={"FAKE_IGNORE_SIGTERM": "1"}))
        await _wait_for(driver, "fake", ModelState.READY)
        record = await _record(driver)
        seen: list[ModelState] = []
        with anyio.fail_after(WAIT_S):
            async with anyio.create_task_group() as group:
                group.start_soon(driver.stop, "fake")
                await anyio.sleep(0.1)
                seen.append((await driver.status("fake")).state)
        stopped = await driver.status("fake")

    assert seen == [ModelState.STOPPING]
    assert stopped.state is ModelState.STOPPED
    assert stopped.served_name == "fake-served"
    assert linux_identity(record.pid) is None
    assert "ignoring SIGTERM" in await anyio.Path(record.log_path).read_text()


async def test_a_stop_with_the_disk_full_stops_the_model_and_reads_stopped_not_failed(
    driver: ProcessDriver, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 31 item 18: the record's removal failed on a full disk, so the stop was an internal error
    # and the record of the dead process read as Failed.
    await driver.start(_spec())
    await _wait_for(driver, "fake", ModelState.READY)
    record = await _record(driver)
    records_file = workspace / "state" / "processes.json"

    def full_disk(path: Path, value: object, **options: Any) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(_process_records, "write_json_atomic", full_disk)
    with pytest.raises(StateWriteError) as refused:
        await driver.stop("fake")
    stopped = await driver.status("fake")
    kept = [entry["modelId"] for entry in json.loads(records_file.read_text())["processes"]]
    monkeypatch.undo()
    listed = await driver.list_statuses()  # there is room again: the removal reaches the file
    written = json.loads(records_file.read_text())["processes"]

    assert refused.value.disk_full
    assert str(records_file) in str(refused.value)
    assert linux_identity(record.pid) is None
    assert stopped.state is ModelState.STOPPED
    assert kept == ["fake"]
    assert listed == []
    assert written == []


@pytest.fixture
def stranger() -> Iterator[subprocess.Popen[bytes]]:
    """An unrelated process, standing in for one that got a dead model's pid."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process
    process.kill()
    process.wait(timeout=WAIT_S)


async def test_a_stale_record_is_failed_and_its_reused_pid_left_alone(
    workspace: Path, driver: ProcessDriver, stranger: subprocess.Popen[bytes]
) -> None:
    identity = linux_identity(stranger.pid)
    assert identity is not None
    changes = {"pid": stranger.pid, "start_time": "old-boot:1", "executable": identity.executable}
    await driver.records.put(_record_for(driver, **changes))

    async with _driver(workspace) as successor:
        adopted = await successor.adopt()
        await successor.stop("fake")
        remaining = await successor.records.all()

    assert [(status.id, status.state) for status in adopted] == [("fake", ModelState.FAILED)]
    assert adopted[0].error is not None
    assert adopted[0].error.startswith("the process is gone")
    assert stranger.poll() is None
    assert remaining == []


def _record_for(driver: ProcessDriver, **changes: Any) -> ProcessRecord:
    fields: dict[str, Any] = {
        "model_id": "fake",
        "served_name": "fake-served",
        "runtime": "llamacpp",
        "executable_ref": ExecutableRef(name="fake-server", version="1"),
        "port": driver.config.port_range_start,
        "log_path": str(driver.config.logs_dir / "fake.log"),
        "cwd": str(driver.config.model_roots[0]),
        "argv": ["fake-server"],
        "config_hash": "0123456789abcdef",
        "budget_gib": 1.0,
        "started_at": datetime.now(UTC),
        **changes,
    }
    return ProcessRecord(**fields)


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"model_path": "../outside"}, ModelPathRejectedError),
        ({"model_path": "m/absent.bin"}, ModelPathRejectedError),
        ({"executable": ExecutableRef(name="fake-server", version="2")}, UnknownExecutableError),
        ({"argv": ["--model", MODEL, "--port", "1"]}, LaunchRejectedError),
        ({"env": {"LLAMA_API_KEY": "mine"}}, LaunchRejectedError),
    ],
)
async def test_refused_launches_leave_nothing_behind(
    driver: ProcessDriver, workspace: Path, changes: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        await driver.start(_spec(**changes))

    assert (await driver.status("fake")).state is ModelState.STOPPED
    assert await driver.records.all() == []
    assert not (workspace / "state" / "keys" / "fake.key").exists()


async def test_a_container_spec_is_refused(driver: ProcessDriver) -> None:
    spec = ContainerLaunch(
        model_id="fake",
        served_name="fake",
        runtime="vllm",
        argv=[],
        model_path=MODEL,
        budget_gib=1.0,
        config_hash="0123456789abcdef",
        image="vllm/vllm-openai",
    )

    with pytest.raises(LaunchRejectedError, match="process launch specs only"):
        await driver.start(spec)


async def test_an_unknown_model_is_stopped_and_has_no_logs_or_upstream(driver: ProcessDriver) -> None:
    await driver.stop("ghost")

    assert (await driver.status("ghost")).state is ModelState.STOPPED
    assert await driver.list_statuses() == []
    for ask in (driver.logs, driver.upstream_url, driver.upstream_headers):
        with pytest.raises(ModelNotFoundError):
            await ask("ghost")


async def test_logs_rotate_at_each_launch(driver: ProcessDriver) -> None:
    await driver.start(_spec())
    await _wait_for(driver, "fake", ModelState.READY)
    log = Path((await _record(driver)).log_path)
    await driver.stop("fake")
    await driver.start(_spec())
    await _wait_for(driver, "fake", ModelState.READY)

    assert log.with_name("fake.log.1").read_text().startswith("listening on")
    assert (await driver.logs("fake"))[0].startswith("listening on")
