"""The local agent's supervision: a dead agent comes back, with bounded restarts, and for the shutdown.

The agent here is a stand-in process (a Python script run as ``… serve --config FILE``, as the real
``mirbad-agent`` is) that counts its starts in a file and then sleeps or exits at once; the probe
answers whenever a stand-in runs. Real processes, no real agent: ``test_up_real.py`` has that.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import anyio
import pytest
from tests._support.polling import eventually

from mirbad_master._agent_supervisor import AgentSupervisor
from mirbad_master._local_agent import LocalAgent
from mirbad_protocol import MirbadError

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
]

WAIT_S = 20.0

STAND_IN = """
import os, pathlib, sys, time
starts = pathlib.Path(sys.argv[1])
starts.write_text(starts.read_text() + "x" if starts.exists() else "x")
if pathlib.Path(sys.argv[2]).exists():
    sys.exit(3)
(starts.parent / f"serving-{os.getpid()}").touch()
time.sleep(120)
"""


class _Probe:
    """Answers once the running stand-in says it serves, as a live agent does."""

    def __init__(self, agent: LocalAgent) -> None:
        self.agent = agent

    async def info(self) -> object:
        pid_file = self.agent.log_path.parent / "agent.pid"
        pid = pid_file.read_text().strip() if pid_file.exists() else ""
        if not self.agent.running or not (self.agent.log_path.parent / f"serving-{pid}").exists():
            raise MirbadError("not serving yet")
        return {"pid": pid}


class _StandIn:
    def __init__(self, tmp_path: Path) -> None:
        script = tmp_path / "stand-in.py"
        script.write_text(STAND_IN)
        self.starts = tmp_path / "starts"
        self.crashing = tmp_path / "crash"
        settings = tmp_path / "agent.json"
        settings.write_text("{}")
        command = [sys.executable, str(script), str(self.starts), str(self.crashing)]
        self.agent = LocalAgent(tmp_path, settings, command=command)

    @property
    def count(self) -> int:
        return len(self.starts.read_text()) if self.starts.exists() else 0

    @property
    def pid(self) -> int:
        return int((self.agent.log_path.parent / "agent.pid").read_text())


_until = partial(eventually, timeout_s=WAIT_S, poll_s=0.02)


@pytest.fixture
async def stand_in(tmp_path: Path) -> AsyncIterator[_StandIn]:
    stand_in = _StandIn(tmp_path)
    await stand_in.agent.start()
    await _until(lambda: stand_in.count == 1)
    try:
        yield stand_in
    finally:
        with anyio.CancelScope(shield=True):
            await stand_in.agent.stop(grace_s=5)


async def test_a_killed_agent_is_restarted(stand_in: _StandIn) -> None:
    supervisor = AgentSupervisor(stand_in.agent, _Probe(stand_in.agent), backoff_s=0.01)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(supervisor.run)
        first = stand_in.pid
        os.kill(first, signal.SIGKILL)
        await _until(lambda: stand_in.count == 2 and stand_in.agent.running)
        second = stand_in.pid
        await supervisor.stop(grace_s=5)

    assert second != first
    assert supervisor.restarts == 1
    assert not stand_in.agent.running


async def test_restarts_in_a_row_are_bounded_and_the_shutdown_still_brings_it_back(
    stand_in: _StandIn,
) -> None:
    stand_in.crashing.touch()
    supervisor = AgentSupervisor(
        stand_in.agent, _Probe(stand_in.agent), backoff_s=0.01, backoff_max_s=0.02, max_restarts=3
    )
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(supervisor.run)
        os.kill(stand_in.pid, signal.SIGKILL)
        # One start, then three restarts that exit at once; then it gives up.
        await _until(lambda: stand_in.count == 4 and not stand_in.agent.running)
        given_up_at = stand_in.count
        stand_in.crashing.unlink()
        supervisor.hurry()
        back = await supervisor.ensure_answering()
        await supervisor.stop(grace_s=5)

    assert given_up_at == 4
    assert back
    assert stand_in.count == 5


async def test_a_stopped_supervisor_restarts_nothing(stand_in: _StandIn) -> None:
    supervisor = AgentSupervisor(stand_in.agent, _Probe(stand_in.agent), backoff_s=0.01)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(supervisor.run)
        await supervisor.stop(grace_s=5)

    assert not await supervisor.ensure_answering()
    assert stand_in.count == 1


ARGV_RECORDER = """
import pathlib, sys
(pathlib.Path(sys.argv[1]) / "argv").write_text("\\n".join(sys.argv[2:]))
"""


@pytest.mark.parametrize(("level", "expected"), [(logging.DEBUG, "debug"), (logging.WARNING, "warning")])
async def test_the_local_agent_logs_at_the_masters_level(tmp_path: Path, level: int, expected: str) -> None:
    # `mirbad up --log-level` used to stop at the master: the agent's log stayed at info either way.
    script = tmp_path / "record.py"
    script.write_text(ARGV_RECORDER)
    settings = tmp_path / "agent.json"
    settings.write_text("{}")
    agent = LocalAgent(tmp_path, settings, command=[sys.executable, str(script), str(tmp_path)])
    root = logging.getLogger()
    before = root.level
    root.setLevel(level)
    try:
        await agent.start()
        assert await agent.wait_exit() == 0
    finally:
        root.setLevel(before)
    argv = (tmp_path / "argv").read_text().splitlines()
    assert argv == ["serve", "--config", str(settings), "--log-level", expected]


async def test_a_restart_on_purpose_is_no_crash(stand_in: _StandIn) -> None:
    # mirbad up restarts the agent once it built llama-server, so the agent reads its new settings.
    supervisor = AgentSupervisor(stand_in.agent, _Probe(stand_in.agent), backoff_s=30, max_restarts=1)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(supervisor.run)
        first = stand_in.pid
        assert await supervisor.restart()
        second = stand_in.pid
        assert await supervisor.restart()
        await _until(lambda: stand_in.count == 3 and stand_in.agent.running)
        third = stand_in.pid
        await supervisor.stop(grace_s=5)

    assert len({first, second, third}) == 3
    # Neither counted as a crash: no back-off was waited for, none gave up after max_restarts.
    assert supervisor.restarts == 0
