"""The telemetry ring: bounded per-model history, rates from the previous sample, queries."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import anyio
import anyio.lowlevel
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirbad_protocol import ModelMetrics
from mirbad_runtime import DEFAULT_RING_CAPACITY, TelemetryRing

pytestmark = pytest.mark.anyio

AT = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


def _sample(
    model_id: str, seconds: float, generated: float | None = None, prompt: float | None = None
) -> ModelMetrics:
    return ModelMetrics(
        model_id=model_id,
        at=AT + timedelta(seconds=seconds),
        generation_tokens_total=generated,
        prompt_tokens_total=prompt,
    )


def test_rates_come_from_the_previous_sample_of_the_same_model() -> None:
    ring = TelemetryRing()
    first = ring.add(_sample("a", 0, generated=100, prompt=10))
    ring.add(_sample("b", 1, generated=5_000))
    second = ring.add(_sample("a", 4, generated=300, prompt=10))
    assert first.generation_tokens_per_second is None
    assert (second.generation_tokens_per_second, second.prompt_tokens_per_second) == (50.0, 0.0)
    assert ring.latest("a") == second


def test_a_counter_reset_gives_no_rate_for_that_interval() -> None:
    ring = TelemetryRing()
    ring.add(_sample("a", 0, generated=900))
    assert ring.add(_sample("a", 5, generated=40)).generation_tokens_per_second is None
    assert ring.add(_sample("a", 10, generated=90)).generation_tokens_per_second == 10.0


def test_the_ring_keeps_only_the_newest_samples() -> None:
    ring = TelemetryRing(capacity=3)
    for second in range(5):
        ring.add(_sample("a", second, generated=second * 10))
    assert [sample.at for sample in ring.history("a")] == [AT + timedelta(seconds=s) for s in (2, 3, 4)]
    assert all(sample.generation_tokens_per_second == 10.0 for sample in ring.history("a"))


def test_history_filters() -> None:
    ring = TelemetryRing()
    for second in range(6):
        ring.add(_sample("a", second))
    seconds = [
        int((sample.at - AT).total_seconds()) for sample in ring.history("a", since=AT + timedelta(seconds=2))
    ]
    assert seconds == [3, 4, 5]
    assert [s.at for s in ring.history("a", limit=2)] == [
        AT + timedelta(seconds=4),
        AT + timedelta(seconds=5),
    ]
    assert len(ring.history("a", limit=100)) == 6
    assert ring.history("a", limit=0) == []
    assert ring.history("missing") == []
    with pytest.raises(ValueError, match="negative"):
        ring.history("a", limit=-1)


def test_snapshot_latest_and_forgetting() -> None:
    ring = TelemetryRing()
    ring.add(_sample("b", 0))
    ring.add(_sample("a", 1))
    latest_b = ring.add(_sample("b", 2))
    assert list(ring.snapshot()) == ["a", "b"]
    assert ring.snapshot()["b"] == latest_b
    assert ring.model_ids() == ["a", "b"]
    ring.forget("b")
    ring.forget("never-seen")
    assert ring.latest("b") is None
    assert ring.model_ids() == ["a"]


def test_a_forgotten_model_starts_its_rates_afresh() -> None:
    """A model started again counts from zero; comparing with the old run would give a bogus rate."""
    ring = TelemetryRing()
    ring.add(_sample("a", 0, generated=10_000))
    ring.forget("a")
    assert ring.add(_sample("a", 60, generated=50)).generation_tokens_per_second is None


def test_retain_forgets_the_models_not_listed() -> None:
    ring = TelemetryRing()
    for model_id in ("a", "b", "c"):
        ring.add(_sample(model_id, 0))
    ring.retain({"b", "z"})
    assert ring.model_ids() == ["b"]


def test_capacity_must_be_positive() -> None:
    assert TelemetryRing().capacity == DEFAULT_RING_CAPACITY
    with pytest.raises(ValueError, match="at least one"):
        TelemetryRing(capacity=0)


@given(
    capacity=st.integers(1, 8),
    events=st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 1000)), max_size=40),
)
def test_ring_invariants(capacity: int, events: list[tuple[str, int]]) -> None:
    ring = TelemetryRing(capacity=capacity)
    for step, (model_id, total) in enumerate(events):
        ring.add(_sample(model_id, step, generated=total))
    for model_id in ring.model_ids():
        history = ring.history(model_id)
        expected = [total for seen, total in events if seen == model_id][-capacity:]
        assert [sample.generation_tokens_total for sample in history] == expected
        assert all(
            sample.generation_tokens_per_second is None or sample.generation_tokens_per_second >= 0
            for sample in history
        )
        assert ring.latest(model_id) == history[-1]


async def test_concurrent_tasks_share_one_ring() -> None:
    ring = TelemetryRing(capacity=50)

    async def scrape_loop(model_id: str) -> None:
        for step in range(40):
            ring.add(_sample(model_id, step, generated=step * 2))
            await anyio.lowlevel.checkpoint()

    async def reader() -> None:
        for _ in range(40):
            ring.snapshot()
            await anyio.to_thread.run_sync(ring.history, "m0")

    async with anyio.create_task_group() as group:
        for index in range(4):
            group.start_soon(scrape_loop, f"m{index}")
        group.start_soon(reader)
    assert ring.model_ids() == ["m0", "m1", "m2", "m3"]
    assert all(len(ring.history(model_id)) == 40 for model_id in ring.model_ids())
    assert all(s.generation_tokens_per_second == 2.0 for s in ring.history("m2")[1:])
