"""Memory admission: whether a model may start on this node now.

The rule lives in :func:`check_admission`, a pure function of a request, a memory snapshot and the
budgets already placed. :class:`AdmissionController` adds what needs state: it reads memory under a
lock, so two starts never both count the same free memory, and holds a start slot per admitted model
until the caller releases it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

import anyio

from mirbad_protocol import ContainerLaunch, GpuMemory, GpuSelection, MemorySnapshot, ProcessLaunch

from .exceptions import LaunchRejectedError, MemoryAdmissionError, StartConflictError

__all__ = [
    "DEFAULT_START_SLOT_TIMEOUT_S",
    "AdmissionController",
    "AdmissionRequest",
    "ModelBudget",
    "check_admission",
]

DEFAULT_START_SLOT_TIMEOUT_S: Final = 1800.0
"""How long an unreleased start slot blocks others (a model stuck loading must not block forever)."""

_MIB_PER_GIB: Final = 1024.0


@dataclass(frozen=True, slots=True)
class ModelBudget:
    """Memory a model holds, or is about to hold, on this node.

    Attributes:
        model_id: the model.
        budget_gib: its memory budget. On discrete GPUs vLLM turns the budget into a per-GPU
            fraction, so the full budget is charged to every GPU the model uses.
        gpus: the GPUs it uses (``all`` means every discrete GPU of the node).
    """

    model_id: str
    budget_gib: float
    gpus: GpuSelection = field(default_factory=GpuSelection)

    @classmethod
    def from_launch(cls, spec: ContainerLaunch | ProcessLaunch) -> ModelBudget:
        """The budget and GPU selection of a launch spec."""
        return cls(model_id=spec.model_id, budget_gib=spec.budget_gib, gpus=spec.gpus)


@dataclass(frozen=True, slots=True)
class AdmissionRequest:
    """One start (or restart) to admit.

    Attributes:
        model_id: the model to start.
        budget_gib: the memory it will take.
        gpus: where it will run.
        force: skip the memory rules (an operator's override; placement and start conflicts still apply).
        restart: the model's running instance is about to be replaced, so its budget counts as free.
    """

    model_id: str
    budget_gib: float
    gpus: GpuSelection = field(default_factory=GpuSelection)
    force: bool = False
    restart: bool = False

    @classmethod
    def from_launch(
        cls, spec: ContainerLaunch | ProcessLaunch, *, force: bool = False, restart: bool = False
    ) -> AdmissionRequest:
        """The request for launching ``spec``."""
        return cls(spec.model_id, spec.budget_gib, spec.gpus, force=force, restart=restart)


def check_admission(
    request: AdmissionRequest, memory: MemorySnapshot, running: Sequence[ModelBudget]
) -> None:
    """Refuse a start that does not fit; return quietly when it does.

    Unified memory (no discrete GPU), or a model that uses no GPU: the budget must fit the system's
    available memory minus the reserve. Discrete GPUs: on every GPU the model uses, the budgets of the
    models already placed there plus this budget must fit the GPU's total memory minus the reserve.
    Totals rather than nvidia-smi's free memory are compared because a model still loading has not
    taken its memory yet, while its budget already counts.

    On a restart the running instance's own budget is counted as released: it is added back to the
    available system memory and left out of the GPU sums. A plain start counts every entry of
    ``running``; a start of a model that already runs launches nothing, so callers skip admission then.

    Args:
        request: the start to admit.
        memory: the node's memory now (its ``reserve_gib`` applies to the system and to each GPU).
        running: the models that hold memory: running, starting and admitted but not yet visible.

    Raises:
        MemoryAdmissionError: the budget does not fit and ``force`` is off.
        LaunchRejectedError: the request names a GPU this node does not have.
    """
    released = [b for b in running if request.restart and b.model_id == request.model_id]
    others = [b for b in running if not (request.restart and b.model_id == request.model_id)]
    if not _discrete(memory) or request.gpus.mode == "none":
        if not request.force:
            available = memory.available_gib + sum(b.budget_gib for b in released)
            _refuse_over(request, available, memory.reserve_gib, gpu_uuid=None)
        return
    targets = _gpus_used(request.gpus, memory, strict=True)
    if request.force:
        return
    for gpu in targets:
        placed = sum(b.budget_gib for b in others if _places_on(b, gpu, memory))
        _refuse_over(request, gpu.total_mib / _MIB_PER_GIB - placed, memory.reserve_gib, gpu_uuid=gpu.uuid)


def _discrete(memory: MemorySnapshot) -> bool:
    return not memory.unified and bool(memory.gpus)


def _gpus_used(selection: GpuSelection, memory: MemorySnapshot, *, strict: bool) -> list[GpuMemory]:
    if selection.mode == "none":
        return []
    if selection.mode == "all":
        return list(memory.gpus)
    by_uuid = {gpu.uuid: gpu for gpu in memory.gpus}
    unknown = [uuid for uuid in selection.uuids if uuid not in by_uuid]
    if unknown and strict:
        raise LaunchRejectedError(f"this node has no GPU {', '.join(unknown)}")
    return [by_uuid[uuid] for uuid in dict.fromkeys(selection.uuids) if uuid in by_uuid]


def _places_on(budget: ModelBudget, gpu: GpuMemory, memory: MemorySnapshot) -> bool:
    return any(used.uuid == gpu.uuid for used in _gpus_used(budget.gpus, memory, strict=False))


def _refuse_over(
    request: AdmissionRequest, available: float, reserve: float, *, gpu_uuid: str | None
) -> None:
    if request.budget_gib > available - reserve:
        raise MemoryAdmissionError(
            request.model_id, request.budget_gib, available, reserve, gpu_uuid=gpu_uuid
        )


@dataclass(frozen=True, slots=True)
class _StartSlot:
    budget: ModelBudget
    expires_at: float


class AdmissionController:
    """Admits starts one decision at a time and keeps a slot for each admitted, still-loading model.

    On unified memory only one model may be starting: the memory a loading model will take is not yet
    visible in ``MemAvailable``, so a second start would be admitted against memory already promised.
    A second start is refused at once with :class:`StartConflictError` rather than queued: a model can
    take minutes to load, the master's per-node start lane already serializes its own starts, and a
    caller that gets the error can wait and retry on its own terms. ``force`` does not lift the
    conflict; it only skips the memory rule. On discrete GPUs starts may overlap, and the budgets of
    admitted models not yet in ``running`` are added to the GPU sums.

    A slot lasts until :meth:`release` (call it when the model leaves Starting, or when its launch
    fails) or until ``start_slot_timeout_s`` has passed.

    Args:
        read_memory: takes a memory snapshot (for example ``MemoryProbe.snapshot``); it must bound
            its own waits, as :class:`NvidiaSmiProbe` does.
        start_slot_timeout_s: when an unreleased slot stops counting.
        clock: monotonic seconds (the event loop's clock by default).
    """

    def __init__(
        self,
        read_memory: Callable[[], Awaitable[MemorySnapshot]],
        *,
        start_slot_timeout_s: float = DEFAULT_START_SLOT_TIMEOUT_S,
        clock: Callable[[], float] = anyio.current_time,
    ) -> None:
        if start_slot_timeout_s <= 0:
            raise ValueError("start_slot_timeout_s must be positive")
        self._read_memory = read_memory
        self._slot_timeout_s = start_slot_timeout_s
        self._clock = clock
        self._lock = anyio.Lock()
        self._slots: dict[str, _StartSlot] = {}

    async def admit(self, request: AdmissionRequest, running: Sequence[ModelBudget]) -> MemorySnapshot:
        """Decide ``request`` against fresh memory and, when admitted, hold a start slot for it.

        Args:
            request: the start to admit; admitting a model that holds a slot replaces its slot.
            running: the models that hold memory now (Starting and Ready), as the driver reports them.

        Returns:
            The memory snapshot the decision was made on.

        Raises:
            StartConflictError: unified memory and another model is still starting.
            MemoryAdmissionError: the budget does not fit (see :func:`check_admission`).
            LaunchRejectedError: the request names a GPU this node does not have.
        """
        async with self._lock:
            memory = await self._read_memory()
            now = self._clock()
            self._slots = {key: slot for key, slot in self._slots.items() if slot.expires_at > now}
            if not _discrete(memory):
                busy = next((key for key in self._slots if key != request.model_id), None)
                if busy is not None:
                    raise StartConflictError(request.model_id, busy)
            known = {budget.model_id for budget in running}
            pending = [
                slot.budget
                for key, slot in self._slots.items()
                if key not in known and key != request.model_id
            ]
            check_admission(request, memory, [*running, *pending])
            budget = ModelBudget(request.model_id, request.budget_gib, request.gpus)
            self._slots[request.model_id] = _StartSlot(budget, now + self._slot_timeout_s)
            return memory

    def release(self, model_id: str) -> None:
        """Free the start slot of ``model_id``; releasing a model without a slot does nothing."""
        self._slots.pop(model_id, None)

    def starting(self) -> list[str]:
        """The models holding a start slot that has not expired, in id order."""
        now = self._clock()
        return sorted(key for key, slot in self._slots.items() if slot.expires_at > now)
