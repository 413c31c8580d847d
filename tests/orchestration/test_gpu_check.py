"""The GPU check before a benchmark: readings over the window, mean and max per GPU, the verdicts.

The readings come from a scripted source (one list of GPUs per reading, the last one repeated); the
window is tiny (0.1 s, a reading every 0.05 s: three readings).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import fmean

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mirbad_orchestration.exceptions import NodeUnreachableError
from mirbad_orchestration.jobs import GPU_BUSY_NOTE, GpuSampler
from mirbad_protocol import GpuMemory

pytestmark = pytest.mark.anyio


def gpu(index: int, utilization: float | None) -> GpuMemory:
    return GpuMemory(index=index, uuid=f"GPU-{index}", total_mib=81920, utilization_percent=utilization)


@dataclass
class Script:
    """Each call answers the next reading (the last one again once they run out)."""

    readings: list[list[GpuMemory]]
    calls: int = 0
    error: Exception | None = None
    failing_from: int = 0

    async def read(self) -> list[GpuMemory]:
        self.calls += 1
        if self.error is not None and self.calls > self.failing_from:
            raise self.error
        return self.readings[min(self.calls, len(self.readings)) - 1]


def sampler(script: Script, **options: float) -> GpuSampler:
    return GpuSampler(script.read, window_s=0.1, interval_s=0.05, **options)


async def test_a_gpu_busy_on_average_is_busy_with_work_outside_mirbad() -> None:
    script = Script([[gpu(0, 40), gpu(1, 0)], [gpu(0, 60), gpu(1, 2)], [gpu(0, 80), gpu(1, 1)]])
    checked = await sampler(script).check()

    assert script.calls == 3  # a fresh reading each interval, none from a cache
    assert checked.verdict == "busy"
    assert checked.noisy() == [f"{GPU_BUSY_NOTE} (GPU 0: 60 % mean, 80 % max)"]
    assert [(load.index, load.mean_percent, load.max_percent, load.readings) for load in checked.loads] == [
        (0, 60.0, 80.0, 3),
        (1, 1.0, 2.0, 3),
    ]


async def test_one_spike_over_the_window_is_still_idle() -> None:
    checked = await sampler(Script([[gpu(0, 0)], [gpu(0, 0)], [gpu(0, 27)]])).check()
    assert (checked.verdict, checked.noisy()) == ("idle", [])
    assert checked.loads[0].max_percent == 27.0


async def test_ten_percent_is_idle_and_above_it_busy() -> None:
    assert (await sampler(Script([[gpu(0, 10)]])).check()).verdict == "idle"
    assert (await sampler(Script([[gpu(0, 10.5)]])).check()).verdict == "busy"


async def test_where_mirbad_itself_may_be_at_work_the_note_says_so() -> None:
    checked = await sampler(Script([[gpu(0, 90)]])).check()
    assert checked.verdict == "busy"
    assert checked.noisy("model 'x' was starting") == [
        "GPU busy while model 'x' was starting (GPU 0: 90 % mean, 90 % max)"
    ]


async def test_every_busy_gpu_is_named_in_the_note() -> None:
    checked = await sampler(Script([[gpu(0, 50), gpu(1, 5), gpu(2, 20)]])).check()
    assert checked.noisy() == [f"{GPU_BUSY_NOTE} (GPU 0: 50 % mean, 50 % max; GPU 2: 20 % mean, 20 % max)"]


async def test_no_gpu_is_skipped_after_one_reading() -> None:
    script = Script([[]])
    checked = await sampler(script).check()
    assert (checked.verdict, checked.noisy(), script.calls) == ("skipped: the node has no GPU", [], 1)


async def test_gpus_without_utilization_say_the_agent_does_not_report_it() -> None:
    checked = await sampler(Script([[gpu(0, None), gpu(1, None)]])).check()
    assert checked.verdict == "skipped: the node agent does not report GPU utilization"


async def test_a_gpu_without_utilization_is_left_out_of_the_verdict() -> None:
    checked = await sampler(Script([[gpu(0, None), gpu(1, 3)]])).check()
    assert checked.verdict == "idle"
    assert [load.uuid for load in checked.loads] == ["GPU-1"]


async def test_a_node_that_cannot_be_read_is_skipped_with_the_reason() -> None:
    error = NodeUnreachableError("gpu-1", "node 'gpu-1' is unreachable: connection refused")
    script = Script([[gpu(0, 90)]], error=error, failing_from=1)
    checked = await sampler(script).check()
    assert checked.verdict == (
        "skipped: the node's GPUs could not be read (node 'gpu-1' is unreachable: connection refused)"
    )
    assert checked.noisy() == []
    assert script.calls == 2  # the readings stop at the first failure


async def test_a_hanging_reading_is_bounded() -> None:
    async def hangs() -> Sequence[GpuMemory]:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    checked = await GpuSampler(hangs, window_s=0.1, interval_s=0.05, read_timeout_s=0.05).check()
    assert checked.verdict == "skipped: the node's GPUs could not be read (no answer within 0.05 s)"


def test_the_spec_window_is_six_readings_a_second_apart() -> None:
    assert GpuSampler(Script([[]]).read).readings == 6


@pytest.mark.parametrize("options", [{"window_s": -1}, {"interval_s": 0}, {"read_timeout_s": 0}])
def test_bad_bounds_are_refused(options: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="window_s"):
        GpuSampler(Script([[]]).read, **options)


_UTILIZATION = st.one_of(st.none(), st.floats(0, 100))


@settings(deadline=None)  # one example runs the sampler's sleeps: no timing checks on a loaded box
@given(st.lists(st.lists(_UTILIZATION, min_size=1, max_size=4), min_size=3, max_size=3))
def test_the_verdict_follows_the_mean_of_each_gpu(rows: list[list[float | None]]) -> None:
    width = min(len(row) for row in rows)
    readings = [[gpu(i, row[i]) for i in range(width)] for row in rows]
    script = Script(readings)
    checked = anyio.run(lambda: GpuSampler(script.read, window_s=0.002, interval_s=0.001).check())
    columns = [[value for row in rows if (value := row[i]) is not None] for i in range(width)]
    means = [min(fmean(column), max(column)) for column in columns if column]
    if not means:
        assert checked.verdict == "skipped: the node agent does not report GPU utilization"
    else:
        assert checked.verdict == ("busy" if max(means) > 10 else "idle")
        assert all(load.mean_percent <= load.max_percent for load in checked.loads)
