"""The in-memory router counters."""

from __future__ import annotations

import threading

import anyio
import pytest

from mirbad_protocol import RouterModelStats
from mirbad_router import RouterStats


def test_counts_total_failed_and_in_flight_per_served_name() -> None:
    stats = RouterStats()
    stats.begin("b")
    stats.begin("a")
    stats.begin("a")
    stats.end("a", failed=True)
    assert stats.snapshot() == [
        RouterModelStats(served_name="a", total=2, failed=1, in_flight=1),
        RouterModelStats(served_name="b", total=1, failed=0, in_flight=1),
    ]
    assert stats.for_model("unknown") == RouterModelStats(served_name="unknown")


def test_threads_never_lose_a_count() -> None:
    stats = RouterStats()

    def hammer() -> None:
        for index in range(2000):
            stats.begin("m")
            stats.end("m", failed=index % 4 == 0)

    threads = [threading.Thread(target=hammer) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert stats.for_model("m") == RouterModelStats(served_name="m", total=16000, failed=4000, in_flight=0)


@pytest.mark.anyio
async def test_tasks_see_their_requests_in_flight() -> None:
    stats = RouterStats()
    release = anyio.Event()

    async def request() -> None:
        stats.begin("m")
        await release.wait()
        stats.end("m", failed=False)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            for _ in range(50):
                group.start_soon(request)
            await anyio.wait_all_tasks_blocked()
            assert stats.for_model("m").in_flight == 50
            release.set()
    assert stats.for_model("m") == RouterModelStats(served_name="m", total=50, failed=0, in_flight=0)
