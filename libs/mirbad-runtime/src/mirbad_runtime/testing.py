"""Test doubles shipped with the library, for the unit tests of code that drives models.

:class:`FakeDriver` implements :class:`~mirbad_runtime.RuntimeDriver` in memory, the way httpx's
``MockTransport`` stands in for a network: callers (the agent's routes, admission, the health loop)
test against it without Docker or processes, then steer it (a state change, a failing start, log lines)
and read back what they asked of it. :class:`FakeProcessHost` stands in for the operating system
behind the process driver: a process table in memory that tests crash, ``exec`` and fork into
(nothing is spawned or signalled for real). :class:`FakeDpapi` stands in for Windows' DPAPI, so the
Windows key protector and the agent's Windows composition run on any platform.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import signal
import threading
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import anyio

from mirbad_protocol import ContainerLaunch, ModelState, ModelStatus, ProcessLaunch

from ._dpapi_keys import Dpapi
from ._driver import RuntimeDriver
from ._gpu_attribution import GpuOwner
from ._process_host import ProcessHost, ProcessIdentity
from .exceptions import DpapiError, ModelNotFoundError

__all__ = ["FakeDpapi", "FakeDriver", "FakeProcess", "FakeProcessHost"]

_RUNNING = (ModelState.STARTING, ModelState.READY)


@dataclass
class _Instance:
    spec: ContainerLaunch | ProcessLaunch
    port: int
    state: ModelState
    started_at: datetime
    error: str | None = None
    lines: list[str] = field(default_factory=list)
    changed: anyio.Event = field(default_factory=anyio.Event)

    def touch(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()


class FakeDriver(RuntimeDriver):
    """A runtime driver that runs nothing and keeps its models in memory.

    A started model takes ``start_state`` (Ready unless told otherwise) on the lowest port from
    ``port_range_start`` that no other model holds, and logs one line. Stopping removes it.

    Args:
        start_state: the state a newly started model reports.
        port_range_start: the first port handed out.
        upstream_host: the host of :meth:`upstream_url` (point :meth:`set_upstream` at a test server
            to have a proxy reach something real).

    Attributes:
        starts: every spec passed to :meth:`start`, in order (including refused ones).
        stops: every model id passed to :meth:`stop`, in order.
        closed: whether :meth:`aclose` ran.
    """

    def __init__(
        self,
        *,
        start_state: ModelState = ModelState.READY,
        port_range_start: int = 8100,
        upstream_host: str = "127.0.0.1",
    ) -> None:
        self.start_state = start_state
        self.port_range_start = port_range_start
        self.upstream_host = upstream_host
        self.starts: list[ContainerLaunch | ProcessLaunch] = []
        self.stops: list[str] = []
        self.closed = False
        self._instances: dict[str, _Instance] = {}
        self._upstreams: dict[str, str] = {}
        self._memory: dict[str, int | None] = {}
        self._gpu_owners: dict[str, GpuOwner] = {}
        self._next_failure: BaseException | None = None

    def fail_next_start(self, error: BaseException) -> None:
        """Make the next :meth:`start` raise ``error`` (a ``LaunchRejectedError``, say) and launch nothing."""
        self._next_failure = error

    def set_state(self, model_id: str, state: ModelState, *, error: str | None = None) -> None:
        """Move a started model to ``state`` (Failed with ``error``, Ready after Starting, ...)."""
        instance = self._instance(model_id)
        instance.state, instance.error = state, error
        instance.touch()

    def add_log(self, model_id: str, *lines: str) -> None:
        """Append log lines to a started model (followers receive them)."""
        instance = self._instance(model_id)
        instance.lines.extend(lines)
        instance.touch()

    def set_memory(self, model_id: str, memory_bytes: int | None) -> None:
        """Make :meth:`memory_bytes` report ``memory_bytes`` for this model while it runs."""
        self._memory[model_id] = memory_bytes

    def set_gpu_owner(self, model_id: str, owner: GpuOwner) -> None:
        """Make :meth:`gpu_owner` report ``owner`` for this model while it runs."""
        self._gpu_owners[model_id] = owner

    def set_upstream(self, model_id: str, url: str) -> None:
        """Make :meth:`upstream_url` return ``url`` for this model."""
        self._upstreams[model_id] = url if url.endswith("/") else url + "/"

    async def start(self, spec: ContainerLaunch | ProcessLaunch) -> ModelStatus:
        """Record ``spec`` and start it, or return the status of the model already running."""
        self.starts.append(spec)
        if self._next_failure is not None:
            failure, self._next_failure = self._next_failure, None
            raise failure
        current = self._instances.get(spec.model_id)
        if current is None or current.state not in _RUNNING:
            self._instances.pop(spec.model_id, None)
            current = _Instance(spec, self._free_port(), self.start_state, datetime.now(UTC))
            current.lines.append(f"fake driver: started {spec.model_id} with {' '.join(spec.argv)}")
            self._instances[spec.model_id] = current
        return _status(current)

    async def stop(self, model_id: str) -> None:
        """Record the stop and forget the model."""
        self.stops.append(model_id)
        instance = self._instances.pop(model_id, None)
        if instance is not None:
            instance.state = ModelState.STOPPED
            instance.touch()

    async def status(self, model_id: str) -> ModelStatus:
        """The model's status; Stopped (with an empty served name) when it was never started."""
        instance = self._instances.get(model_id)
        if instance is None:
            return ModelStatus(id=model_id, served_name="", state=ModelState.STOPPED)
        return _status(instance)

    async def list_statuses(self) -> list[ModelStatus]:
        """Every started model, in id order."""
        return [_status(self._instances[model_id]) for model_id in sorted(self._instances)]

    async def logs(self, model_id: str, tail: int = 200) -> list[str]:
        """The model's last ``tail`` lines."""
        lines = self._instance(model_id).lines
        return lines[-tail:] if tail > 0 else []

    async def follow_logs(self, model_id: str, tail: int = 0) -> AsyncGenerator[str, None]:
        """The last ``tail`` lines, then every line added until the model is stopped or fails."""
        instance = self._instance(model_id)
        position = max(len(instance.lines) - tail, 0) if tail > 0 else len(instance.lines)
        while True:
            for line in instance.lines[position:]:
                yield line
            position = len(instance.lines)
            if instance.state not in _RUNNING:
                return
            await instance.changed.wait()

    async def upstream_url(self, model_id: str) -> str:
        """The URL set with :meth:`set_upstream`, else ``http://{upstream_host}:{port}/``."""
        instance = self._instance(model_id)
        return self._upstreams.get(model_id, f"http://{self.upstream_host}:{instance.port}/")

    async def memory_bytes(self, model_id: str) -> int | None:
        """The value given with :meth:`set_memory` while the model runs, else None."""
        instance = self._instances.get(model_id)
        if instance is None or instance.state not in _RUNNING:
            return None
        return self._memory.get(model_id)

    async def gpu_owner(self, model_id: str) -> GpuOwner | None:
        """The owner given with :meth:`set_gpu_owner` while the model runs, else None."""
        instance = self._instances.get(model_id)
        if instance is None or instance.state not in _RUNNING:
            return None
        return self._gpu_owners.get(model_id)

    async def aclose(self) -> None:
        """Note that the driver was closed."""
        self.closed = True

    def _instance(self, model_id: str) -> _Instance:
        instance = self._instances.get(model_id)
        if instance is None:
            raise ModelNotFoundError(model_id)
        return instance

    def _free_port(self) -> int:
        taken = {instance.port for instance in self._instances.values()}
        port = self.port_range_start
        while port in taken:
            port += 1
        return port


def _status(instance: _Instance) -> ModelStatus:
    spec = instance.spec
    return ModelStatus(
        id=spec.model_id,
        served_name=spec.served_name,
        state=instance.state,
        runtime=spec.runtime,
        port=instance.port,
        error=instance.error,
        config_hash=spec.config_hash,
        budget_gib=spec.budget_gib,
        started_at=instance.started_at,
        # As a real driver reads it back from what runs, so a second lifecycle over this driver (an
        # agent restart) adopts the model with its GPUs.
        gpus=None if spec.gpus.mode == "all" else spec.gpus,
    )


@dataclass
class FakeProcess:
    """One entry of the fake process table.

    Attributes:
        pid: its process id.
        group: its process group.
        start_time: its start-time token (unique per spawn or fork).
        executable: the image it runs now.
        argv: the command line it was started with.
        log_path: where its output would go.
        exit_code: None while it runs, then its status (negative: the signal that ended it).
        ignores_sigterm: SIGTERM leaves it running (only SIGKILL ends it).
        env: the environment it was spawned with (empty for a fork).
    """

    pid: int
    group: int
    start_time: str
    executable: str
    argv: list[str]
    log_path: Path
    exit_code: int | None = None
    ignores_sigterm: bool = False
    env: dict[str, str] = field(default_factory=dict)

    @property
    def running(self) -> bool:
        """Whether it has not ended."""
        return self.exit_code is None


@dataclass
class FakeProcessHost(ProcessHost):
    """A :class:`ProcessHost` over a process table in memory (thread-safe: the driver calls it from threads).

    Attributes:
        processes: every process ever spawned or forked, by pid (ended ones stay, with their exit code).
    """

    processes: dict[int, FakeProcess] = field(default_factory=dict)
    _pids: itertools.count[int] = field(default_factory=lambda: itertools.count(1000))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def spawn(
        self, argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], log_path: Path
    ) -> ProcessIdentity:
        """Enter a new group leader running ``argv[0]``; FileNotFoundError when that file is missing."""
        if not Path(argv[0]).is_file():
            raise FileNotFoundError(argv[0])
        log_path.touch()
        with self._lock:
            pid = next(self._pids)
            process = FakeProcess(pid, pid, f"t{pid}", argv[0], list(argv), log_path, env=dict(env))
            self.processes[pid] = process
        return _identity_of(process)

    def identity(self, pid: int) -> ProcessIdentity | None:
        """The identity of the running process ``pid``, else None."""
        with self._lock:
            process = self.processes.get(pid)
            return _identity_of(process) if process is not None and process.running else None

    def lingers(self, identity: ProcessIdentity) -> bool:
        """The POSIX rule: ours but changed (same start), or running members of its group after it ended."""
        live = self.identity(identity.pid)
        if live is not None:
            return live.start_time == identity.start_time and not identity.same_process(live)
        return bool(self._members(identity.group or identity.pid))

    def terminate(self, identity: ProcessIdentity) -> bool:
        """SIGTERM to the group (and to the process itself when it left the group)."""
        return self._signal(identity, signal.SIGTERM)

    def kill(self, identity: ProcessIdentity) -> bool:
        """SIGKILL to the group (and to the process itself when it left the group)."""
        return self._signal(identity, signal.SIGKILL)

    def exit_code(self, identity: ProcessIdentity) -> int | None:
        """The exit status of the recorded process once it ended."""
        with self._lock:
            process = self.processes.get(identity.pid)
            matches = process is not None and process.start_time == identity.start_time
            return process.exit_code if process is not None and matches else None

    def crash(self, pid: int, code: int = -signal.SIGKILL) -> None:
        """End ``pid`` alone (as an OOM kill or a segfault would); its group's other members go on."""
        with self._lock:
            self.processes[pid].exit_code = code

    def exec_image(self, pid: int, executable: str) -> None:
        """``exec`` in ``pid``: another image, the same pid, start time and group."""
        with self._lock:
            self.processes[pid].executable = executable

    def fork(self, pid: int) -> int:
        """A child of ``pid`` in its group, running the same image; returns the child's pid."""
        with self._lock:
            parent = self.processes[pid]
            child = next(self._pids)
            self.processes[child] = FakeProcess(
                child, parent.group, f"t{child}", parent.executable, parent.argv, parent.log_path
            )
            return child

    def running(self) -> list[FakeProcess]:
        """Every process that has not ended."""
        with self._lock:
            return [process for process in self.processes.values() if process.running]

    def _members(self, group: int) -> list[FakeProcess]:
        with self._lock:
            return [p for p in self.processes.values() if p.running and p.group == group]

    def _signal(self, identity: ProcessIdentity, signum: signal.Signals) -> bool:
        if not self.runs(identity):
            return False
        targets = self._members(identity.group or identity.pid)
        with self._lock:
            own = self.processes.get(identity.pid)
            if own is not None and own.running and own.start_time == identity.start_time:
                targets.append(own)
            for process in targets:
                if signum is signal.SIGKILL or not process.ignores_sigterm:
                    process.exit_code = -signum
        return True


def _identity_of(process: FakeProcess) -> ProcessIdentity:
    return ProcessIdentity(
        pid=process.pid, start_time=process.start_time, executable=process.executable, group=process.group
    )


_TAG_BYTES = 32


class FakeDpapi(Dpapi):
    """DPAPI in memory: a real (if home-made) seal, one secret per simulated Windows account.

    A blob is the data XORed with a keystream derived from the account's secret and the entropy,
    followed by an HMAC of both, so a blob never holds the plain data, and opening one with another
    account's secret, other entropy or a changed byte fails as DPAPI does (:class:`DpapiError`).
    Every call is recorded in :attr:`calls` as ``(operation, entropy)``.

    Args:
        account: the simulated account's secret; two fakes with different ones cannot open each
            other's blobs.
    """

    def __init__(self, account: bytes = b"mirbad-agent-service") -> None:
        self._account = account
        self.calls: list[tuple[str, bytes]] = []

    def protect(self, data: bytes, entropy: bytes) -> bytes:
        """Seal ``data`` for this account and ``entropy``."""
        self.calls.append(("protect", entropy))
        sealed = self._xor(data, entropy)
        return sealed + self._tag(sealed, entropy)

    def unprotect(self, blob: bytes, entropy: bytes) -> bytes:
        """Open a blob this account sealed with the same ``entropy``."""
        self.calls.append(("unprotect", entropy))
        sealed, tag = blob[:-_TAG_BYTES], blob[-_TAG_BYTES:]
        if len(blob) < _TAG_BYTES or not hmac.compare_digest(tag, self._tag(sealed, entropy)):
            raise DpapiError("the data is invalid (another account's blob, other entropy or damaged)")
        return self._xor(sealed, entropy)

    def _tag(self, sealed: bytes, entropy: bytes) -> bytes:
        return hmac.new(self._account, b"tag\x00" + entropy + b"\x00" + sealed, hashlib.sha256).digest()

    def _xor(self, data: bytes, entropy: bytes) -> bytes:
        stream = b""
        for block in itertools.count():
            if len(stream) >= len(data):
                break
            seed = b"stream\x00" + entropy + b"\x00" + block.to_bytes(4, "big")
            stream += hmac.new(self._account, seed, hashlib.sha256).digest()
        return bytes(a ^ b for a, b in zip(data, stream, strict=False))
