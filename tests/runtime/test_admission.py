"""Admission: the memory rules (system, per GPU, restart), and the controller's start slots."""

from __future__ import annotations

from dataclasses import replace

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirbad_protocol import ContainerLaunch, GpuMemory, GpuSelection, MemorySnapshot
from mirbad_runtime import AdmissionController, AdmissionRequest, ModelBudget, check_admission
from mirbad_runtime.exceptions import (
    LaunchRejectedError,
    MemoryAdmissionError,
    MirbadRuntimeError,
    StartConflictError,
)

pytestmark = pytest.mark.anyio

UNIFIED = MemorySnapshot(total_gib=121.0, available_gib=40.0, reserve_gib=8.0)
GPU0 = GpuMemory(index=0, uuid="GPU-0", name="RTX 6000 Ada", total_mib=48 * 1024)
GPU1 = GpuMemory(index=1, uuid="GPU-1", name="RTX 6000 Ada", total_mib=48 * 1024)
DISCRETE = MemorySnapshot(
    total_gib=64.0, available_gib=40.0, reserve_gib=2.0, unified=False, gpus=[GPU0, GPU1]
)
ON_GPU0 = GpuSelection(mode="uuids", uuids=["GPU-0"])
ON_GPU1 = GpuSelection(mode="uuids", uuids=["GPU-1"])
NO_GPU = GpuSelection(mode="none")

LOW_RAM = DISCRETE.model_copy(update={"available_gib": 1.0})

# On DISCRETE: model a holds 30 GiB of GPU-0, model b 10 GiB of both GPUs.
PLACED = [ModelBudget("a", 30.0, ON_GPU0), ModelBudget("b", 10.0)]


def _refusal(
    request: AdmissionRequest, memory: MemorySnapshot, running: list[ModelBudget]
) -> MemoryAdmissionError | None:
    try:
        check_admission(request, memory, running)
    except MemoryAdmissionError as refused:
        return refused
    return None


# ---------------------------------------------------------------- the rule, table-driven

Req, Held = AdmissionRequest, ModelBudget
CASES = [
    # id, request, memory, running, refused on (None = admitted; "system" or a GPU UUID), available
    ("fits exactly", Req("m", 32.0), UNIFIED, [], None, None),
    ("over by a little", Req("m", 32.1), UNIFIED, [], "system", 40.0),
    ("force", Req("m", 500.0, force=True), UNIFIED, [], None, None),
    ("restart releases own", Req("m", 50.0, restart=True), UNIFIED, [Held("m", 20.0)], None, None),
    ("restart, own too small", Req("m", 53.0, restart=True), UNIFIED, [Held("m", 20.0)], "system", 60.0),
    ("restart of a stopped model", Req("m", 33.0, restart=True), UNIFIED, [Held("x", 20.0)], "system", 40.0),
    ("plain start counts own", Req("m", 50.0), UNIFIED, [Held("m", 20.0)], "system", 40.0),
    ("gpu0 full", Req("n", 8.0, ON_GPU0), DISCRETE, PLACED, "GPU-0", 8.0),
    ("gpu0 fits exactly", Req("n", 6.0, ON_GPU0), DISCRETE, PLACED, None, None),
    ("gpu1 has room", Req("n", 36.0, ON_GPU1), DISCRETE, PLACED, None, None),
    ("all gpus: the fullest refuses", Req("n", 30.0), DISCRETE, PLACED, "GPU-0", 8.0),
    ("gpu restart releases own", Req("a", 36.0, ON_GPU0, restart=True), DISCRETE, PLACED, None, None),
    ("gpu restart moving gpus", Req("a", 37.0, ON_GPU1, restart=True), DISCRETE, PLACED, "GPU-1", 38.0),
    ("gpu force", Req("n", 99.0, ON_GPU0, force=True), DISCRETE, PLACED, None, None),
    ("gpu launch ignores system ram", Req("n", 6.0, ON_GPU0), LOW_RAM, PLACED, None, None),
    ("cpu model on a gpu node", Req("n", 39.0, NO_GPU), DISCRETE, PLACED, "system", 40.0),
    ("cpu model fits", Req("n", 38.0, NO_GPU), DISCRETE, PLACED, None, None),
    ("gpu uuids on unified memory", Req("n", 32.0, ON_GPU0), UNIFIED, [], None, None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("request_", "memory", "running", "refused_on", "available"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_rule(
    request_: AdmissionRequest,
    memory: MemorySnapshot,
    running: list[ModelBudget],
    refused_on: str | None,
    available: float | None,
) -> None:
    refused = _refusal(request_, memory, running)
    if refused_on is None:
        assert refused is None
        return
    assert refused is not None
    assert (refused.gpu_uuid or "system", refused.available_gib) == (refused_on, available)
    assert (refused.model_id, refused.requested_gib, refused.reserve_gib) == (
        request_.model_id,
        request_.budget_gib,
        memory.reserve_gib,
    )


def test_the_message_reads_well() -> None:
    memory = MemorySnapshot(total_gib=64.0, available_gib=20.3, reserve_gib=8.0)
    with pytest.raises(MemoryAdmissionError) as caught:
        check_admission(AdmissionRequest("qwen", 24.0), memory, [])
    assert str(caught.value) == "model qwen needs 24.0 GiB, 12.3 GiB available after the 8.0 GiB reserve"
    assert isinstance(caught.value, MirbadRuntimeError)


def test_the_message_names_the_gpu_and_never_goes_negative() -> None:
    refused = _refusal(AdmissionRequest("n", 30.0, ON_GPU0), DISCRETE, [ModelBudget("a", 47.0, ON_GPU0)])
    assert str(refused) == "model n needs 30.0 GiB on GPU GPU-0, 0.0 GiB available after the 2.0 GiB reserve"


def test_an_unknown_gpu_is_rejected_even_with_force() -> None:
    request = AdmissionRequest("n", 1.0, GpuSelection(mode="uuids", uuids=["GPU-0", "GPU-9"]), force=True)
    with pytest.raises(LaunchRejectedError, match="this node has no GPU GPU-9"):
        check_admission(request, DISCRETE, [])


def test_a_running_model_on_a_gpu_that_left_is_ignored() -> None:
    gone = ModelBudget("old", 40.0, GpuSelection(mode="uuids", uuids=["GPU-7"]))
    check_admission(AdmissionRequest("n", 46.0, ON_GPU1), DISCRETE, [gone])


def test_requests_and_budgets_from_a_launch_spec() -> None:
    spec = ContainerLaunch(
        model_id="qwen",
        served_name="qwen",
        runtime="vllm",
        argv=["--model", "/models/qwen"],
        model_path="qwen",
        budget_gib=24.0,
        gpus=ON_GPU1,
        config_hash="0123456789abcdef",
        image="vllm/vllm-openai:latest",
    )
    assert AdmissionRequest.from_launch(spec, restart=True) == AdmissionRequest(
        "qwen", 24.0, ON_GPU1, restart=True
    )
    assert ModelBudget.from_launch(spec) == ModelBudget("qwen", 24.0, ON_GPU1)


# ---------------------------------------------------------------- properties

_GIB = st.floats(0, 512, allow_nan=False)
_SELECTIONS = st.sampled_from([GpuSelection(), ON_GPU0, ON_GPU1, NO_GPU])
_BUDGETS = st.builds(ModelBudget, st.sampled_from(["a", "b", "c", "m"]), st.floats(0.1, 128), _SELECTIONS)
_RUNNING = st.lists(_BUDGETS, max_size=5)
_REQUESTS = st.builds(
    AdmissionRequest,
    st.sampled_from(["m", "a"]),
    st.floats(0.1, 256),
    _SELECTIONS,
    restart=st.booleans(),
)


def _memory(available: float, reserve: float, gpu_total_gib: float | None) -> MemorySnapshot:
    if gpu_total_gib is None:
        return MemorySnapshot(total_gib=max(available, 1.0), available_gib=available, reserve_gib=reserve)
    gpus = [gpu.model_copy(update={"total_mib": gpu_total_gib * 1024}) for gpu in (GPU0, GPU1)]
    return MemorySnapshot(
        total_gib=64.0, available_gib=available, reserve_gib=reserve, unified=False, gpus=gpus
    )


@given(_REQUESTS, _GIB, _GIB, st.none() | _GIB, _RUNNING)
def test_force_always_admits(
    request_: AdmissionRequest,
    available: float,
    reserve: float,
    gpu: float | None,
    running: list[ModelBudget],
) -> None:
    check_admission(replace(request_, force=True), _memory(available, reserve, gpu), running)


@given(_REQUESTS, _GIB, _GIB, _GIB, st.none() | _GIB, _RUNNING)
def test_admission_is_monotonic_in_available_memory(
    request_: AdmissionRequest,
    available: float,
    more: float,
    reserve: float,
    gpu: float | None,
    running: list[ModelBudget],
) -> None:
    if _refusal(request_, _memory(available, reserve, gpu), running) is None:
        assert _refusal(request_, _memory(available + more, reserve, gpu), running) is None
        if gpu is not None:
            assert _refusal(request_, _memory(available, reserve, gpu + more), running) is None


@given(_REQUESTS, _GIB, _GIB, st.none() | _GIB, _RUNNING)
def test_a_restart_is_never_stricter_than_a_start(
    request_: AdmissionRequest,
    available: float,
    reserve: float,
    gpu: float | None,
    running: list[ModelBudget],
) -> None:
    memory = _memory(available, reserve, gpu)
    if _refusal(replace(request_, restart=False), memory, running) is None:
        assert _refusal(replace(request_, restart=True), memory, running) is None


# ---------------------------------------------------------------- the controller


class _Memory:
    """A memory source whose snapshot the test sets, counting reads; it can hold a read open."""

    def __init__(self, snapshot: MemorySnapshot) -> None:
        self.snapshot = snapshot
        self.reads = 0
        self.gate: anyio.Event | None = None

    async def read(self) -> MemorySnapshot:
        self.reads += 1
        if self.gate is not None:
            await self.gate.wait()
        return self.snapshot


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _controller(
    snapshot: MemorySnapshot, *, clock: _Clock | None = None
) -> tuple[AdmissionController, _Memory]:
    memory = _Memory(snapshot)
    controller = AdmissionController(memory.read, start_slot_timeout_s=600.0, clock=clock or _Clock())
    return controller, memory


async def test_unified_memory_admits_one_start_at_a_time() -> None:
    controller, memory = _controller(UNIFIED)
    assert await controller.admit(AdmissionRequest("a", 10.0), []) == UNIFIED
    with pytest.raises(StartConflictError) as caught:
        await controller.admit(AdmissionRequest("b", 1.0, force=True), [])
    assert (caught.value.model_id, caught.value.starting_model_id) == ("b", "a")
    assert str(caught.value) == (
        "model b cannot start while model a is still starting (one start at a time on unified memory)"
    )
    assert controller.starting() == ["a"]
    controller.release("a")
    controller.release("never-admitted")
    await controller.admit(AdmissionRequest("b", 1.0), [ModelBudget("a", 10.0)])
    assert controller.starting() == ["b"]
    assert memory.reads == 3


async def test_admitting_the_starting_model_again_replaces_its_slot() -> None:
    controller, _ = _controller(UNIFIED)
    await controller.admit(AdmissionRequest("a", 10.0), [])
    await controller.admit(AdmissionRequest("a", 12.0, restart=True), [ModelBudget("a", 10.0)])
    assert controller.starting() == ["a"]


async def test_a_refused_start_takes_no_slot() -> None:
    controller, _ = _controller(UNIFIED)
    with pytest.raises(MemoryAdmissionError):
        await controller.admit(AdmissionRequest("a", 100.0), [])
    assert controller.starting() == []
    await controller.admit(AdmissionRequest("b", 1.0), [])


async def test_an_unreleased_slot_expires() -> None:
    clock = _Clock()
    controller, _ = _controller(UNIFIED, clock=clock)
    await controller.admit(AdmissionRequest("a", 10.0), [])
    clock.now += 599.0
    with pytest.raises(StartConflictError):
        await controller.admit(AdmissionRequest("b", 1.0), [])
    clock.now += 1.0
    assert controller.starting() == []
    await controller.admit(AdmissionRequest("b", 1.0), [])


async def test_concurrent_starts_on_unified_memory_conflict() -> None:
    controller, memory = _controller(UNIFIED)
    memory.gate = anyio.Event()
    outcomes: dict[str, str] = {}

    async def start(model_id: str) -> None:
        try:
            await controller.admit(AdmissionRequest(model_id, 5.0), [])
            outcomes[model_id] = "admitted"
        except StartConflictError:
            outcomes[model_id] = "conflict"

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(start, "a")
            group.start_soon(start, "b")
            await anyio.wait_all_tasks_blocked()
            memory.gate.set()
    assert sorted(outcomes.values()) == ["admitted", "conflict"]


async def test_discrete_gpus_allow_overlapping_starts_and_count_pending_budgets() -> None:
    controller, _ = _controller(DISCRETE)
    await controller.admit(AdmissionRequest("a", 30.0, ON_GPU0), [])
    await controller.admit(AdmissionRequest("b", 30.0, ON_GPU1), [])
    assert controller.starting() == ["a", "b"]
    with pytest.raises(MemoryAdmissionError, match=r"17\.0 GiB on GPU GPU-0, 16\.0 GiB available") as caught:
        await controller.admit(AdmissionRequest("c", 17.0, ON_GPU0), [])
    assert caught.value.available_gib == 18.0
    # Once the driver reports a as running its budget is counted once, not twice.
    await controller.admit(AdmissionRequest("c", 16.0, ON_GPU0), [ModelBudget("a", 30.0, ON_GPU0)])


async def test_slot_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        AdmissionController(_Memory(UNIFIED).read, start_slot_timeout_s=0)
