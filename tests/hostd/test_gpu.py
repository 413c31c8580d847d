"""hostd's nvidia-smi reader: one run serves every caller for a short while (the stand-in logs each run)."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from tests._support.hostd import FAKE_NVIDIA_SMI

from mirbad_hostd import GPU_CACHE_S, GPU_QUERY_ARGS, GpuProcesses
from mirbad_hostd.exceptions import GpuQueryError


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stand-in's fixture (one compute process) and its argv log, which this returns."""
    state = tmp_path / "gpu.json"
    state.write_text(json.dumps({"apps": [{"pid": 7, "name": "python3", "used": 100}]}))
    log = tmp_path / "nvidia-smi-argv.jsonl"
    monkeypatch.setenv("MIRBAD_FAKE_NVIDIA_SMI_STATE", str(state))
    monkeypatch.setenv("MIRBAD_FAKE_NVIDIA_SMI_LOG", str(log))
    return log


def runs(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def reader(tmp_path: Path, clock: Clock) -> GpuProcesses:
    return GpuProcesses(str(FAKE_NVIDIA_SMI), tmp_path / "proc", timeout_s=10, clock=clock)


def test_repeated_reads_within_the_cache_time_run_nvidia_smi_once(tmp_path: Path, stand_in: Path) -> None:
    clock = Clock()
    gpus = reader(tmp_path, clock)

    async def scenario() -> None:
        first = await gpus.query()
        clock.now += GPU_CACHE_S / 2
        assert await gpus.query() == first
        assert runs(stand_in) == [list(GPU_QUERY_ARGS)]
        clock.now += GPU_CACHE_S
        assert [row.pid for row in await gpus.query()] == [7]
        assert len(runs(stand_in)) == 2

    anyio.run(scenario)


def test_callers_at_once_share_the_run_in_flight(tmp_path: Path, stand_in: Path) -> None:
    gpus = reader(tmp_path, Clock())
    answers: list[int] = []

    async def one() -> None:
        answers.append(len(await gpus.query()))

    async def scenario() -> None:
        async with anyio.create_task_group() as group:
            for _ in range(5):
                group.start_soon(one)

    anyio.run(scenario)
    assert answers == [1] * 5
    assert len(runs(stand_in)) == 1


def test_a_failure_is_kept_for_the_cache_time_too(tmp_path: Path, stand_in: Path) -> None:
    (tmp_path / "gpu.json").write_text(json.dumps({"exit": 9, "message": "NVIDIA-SMI has failed"}))
    clock = Clock()
    gpus = reader(tmp_path, clock)

    async def scenario() -> None:
        for _ in range(3):
            with pytest.raises(GpuQueryError, match="exited with 9: NVIDIA-SMI has failed"):
                await gpus.query()
        assert len(runs(stand_in)) == 1
        (tmp_path / "gpu.json").write_text(json.dumps({"apps": []}))
        clock.now += GPU_CACHE_S
        assert await gpus.query() == []
        assert len(runs(stand_in)) == 2

    anyio.run(scenario)


def test_no_cache_runs_it_every_time(tmp_path: Path, stand_in: Path) -> None:
    gpus = GpuProcesses(str(FAKE_NVIDIA_SMI), tmp_path / "proc", timeout_s=10, cache_s=0, clock=Clock())

    async def scenario() -> None:
        await gpus.query()
        await gpus.query()

    anyio.run(scenario)
    assert len(runs(stand_in)) == 2
