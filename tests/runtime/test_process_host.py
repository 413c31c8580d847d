"""The POSIX process host against real child processes: detachment, identity, group signals."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from mirbad_runtime import PosixProcessHost, ProcessIdentity, WindowsProcessHost, platform_process_host
from mirbad_runtime._process_host_posix import linux_identity, parse_ps_identity
from mirbad_runtime.exceptions import RuntimeUnavailableError

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux)")

WAIT_S = 20.0
PYTHON = os.path.realpath(sys.executable)


@pytest.fixture
def host() -> Iterator[PosixProcessHost]:
    """A host whose every spawned group is SIGKILLed at teardown, whatever the test did."""
    host = PosixProcessHost()
    spawned: list[int] = []
    original = host.spawn

    def tracking_spawn(*args: object, **kwargs: object) -> ProcessIdentity:
        identity = original(*args, **kwargs)  # type: ignore[arg-type]
        spawned.append(identity.pid)
        return identity

    host.spawn = tracking_spawn  # type: ignore[method-assign]
    yield host
    for pid in spawned:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            _wait_until(lambda pid=pid: host.identity(pid) is None)


def _python(tmp_path: Path, host: PosixProcessHost, code: str, **env: str) -> ProcessIdentity:
    return host.spawn(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env={"PATH": os.environ.get("PATH", ""), **env},
        log_path=tmp_path / "child.log",
    )


def _wait_until(condition: object, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        time.sleep(0.02)


SLEEPER = "import time; print('up', flush=True); time.sleep(120)"


def test_spawn_detaches_into_its_own_session_and_group(tmp_path: Path, host: PosixProcessHost) -> None:
    identity = _python(tmp_path, host, SLEEPER)

    assert os.getsid(identity.pid) == identity.pid
    assert os.getpgid(identity.pid) == identity.pid
    assert os.getsid(identity.pid) != os.getsid(0)
    assert identity.executable == PYTHON
    assert host.identity(identity.pid) == identity
    assert host.is_alive(identity)


def test_output_cwd_and_environment_reach_the_child(tmp_path: Path, host: PosixProcessHost) -> None:
    code = (
        "import os, sys; print('out', os.getcwd(), os.environ.get('MIRBAD_X'), 'HOME' in os.environ);"
        "print('err', file=sys.stderr)"
    )
    identity = _python(tmp_path, host, code, MIRBAD_X="42")
    _wait_until(lambda: host.exit_code(identity) is not None)

    lines = (tmp_path / "child.log").read_text().splitlines()
    assert sorted(lines) == sorted([f"out {tmp_path} 42 False", "err"])
    assert host.exit_code(identity) == 0
    assert (tmp_path / "child.log").stat().st_mode & 0o777 == 0o600


def test_log_file_is_appended_to(tmp_path: Path, host: PosixProcessHost) -> None:
    (tmp_path / "child.log").write_text("earlier\n")
    identity = _python(tmp_path, host, "print('later')")
    _wait_until(lambda: host.exit_code(identity) is not None)

    assert (tmp_path / "child.log").read_text() == "earlier\nlater\n"


def test_terminate_sends_sigterm_and_the_exit_is_reaped(tmp_path: Path, host: PosixProcessHost) -> None:
    identity = _python(tmp_path, host, SLEEPER)

    assert host.terminate(identity)
    # The exit status shows once the kernel has made it a zombie, a moment after its image is gone.
    _wait_until(lambda: host.exit_code(identity) is not None)

    assert host.exit_code(identity) == -signal.SIGTERM
    assert host.identity(identity.pid) is None
    assert not host.terminate(identity)
    assert not host.kill(identity)


def test_kill_ends_the_whole_process_group(tmp_path: Path, host: PosixProcessHost) -> None:
    # The child starts a grandchild in the same group, writes its pid, then waits.
    code = (
        "import subprocess, sys, time;"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']);"
        "print(p.pid, flush=True); time.sleep(120)"
    )
    identity = _python(tmp_path, host, code)
    log = tmp_path / "child.log"
    _wait_until(lambda: log.read_text().endswith("\n"))
    grandchild = linux_identity(int(log.read_text().split()[0]))
    assert grandchild is not None
    assert os.getpgid(grandchild.pid) == identity.pid

    assert host.kill(identity)
    _wait_until(lambda: host.exit_code(identity) is not None and not host.is_alive(grandchild))

    assert host.exit_code(identity) == -signal.SIGKILL


def test_a_reused_pid_is_never_taken_for_the_recorded_process(tmp_path: Path, host: PosixProcessHost) -> None:
    identity = _python(tmp_path, host, SLEEPER)
    earlier_start = replace(identity, start_time="0:1")

    assert not host.is_alive(earlier_start)
    assert not host.lingers(earlier_start)
    assert not host.terminate(earlier_start)
    assert not host.kill(earlier_start)
    assert host.is_alive(identity)


def test_a_process_that_no_longer_matches_but_started_then_is_ours_to_stop(
    tmp_path: Path, host: PosixProcessHost
) -> None:
    """A record without a group (an older agent) and another image: not the model, yet not a stranger."""
    identity = _python(tmp_path, host, SLEEPER)
    changed = replace(identity, executable="/bin/other", group=None)

    assert not host.is_alive(changed)
    assert host.lingers(changed)
    assert host.kill(changed)
    _wait_until(lambda: not host.runs(changed) and not host.is_alive(identity))


def test_the_spawned_identity_names_the_group_the_host_made(tmp_path: Path, host: PosixProcessHost) -> None:
    identity = _python(tmp_path, host, SLEEPER)

    assert identity.group == identity.pid
    assert identity.same_process(replace(identity, executable="/bin/other"))
    assert not identity.same_process(replace(identity, group=identity.pid + 1))


def test_a_wrapper_script_that_execs_stays_the_same_process(tmp_path: Path, host: PosixProcessHost) -> None:
    """``#!/bin/sh`` + ``exec``: the image changes after spawn, pid, start time and group do not."""
    wrapper = tmp_path / "wrapper"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -c "{SLEEPER}"\n')
    wrapper.chmod(0o755)
    identity = host.spawn([str(wrapper)], cwd=tmp_path, env={}, log_path=tmp_path / "w.log")
    _wait_until(lambda: "up" in (tmp_path / "w.log").read_text())

    live = host.identity(identity.pid)
    assert live is not None
    assert live.executable == PYTHON
    assert host.is_alive(identity)
    assert not host.lingers(identity)
    assert host.terminate(identity)
    _wait_until(lambda: not host.runs(identity))


def test_what_lingers_of_a_group_after_its_leader_died_is_found_and_stopped(
    tmp_path: Path, host: PosixProcessHost
) -> None:
    """A wrapper that forks the server instead of exec-ing it, then dies: the server stays in the group."""
    pid_file = tmp_path / "server.pid"
    code = (
        "import pathlib, subprocess, sys, time; "
        f"child = subprocess.Popen([sys.executable, '-c', {SLEEPER!r}]); "
        f"pathlib.Path({str(pid_file)!r}).write_text(str(child.pid)); time.sleep(120)"
    )
    identity = _python(tmp_path, host, code)
    _wait_until(lambda: pid_file.exists() and pid_file.read_text().isdigit())
    server = int(pid_file.read_text())
    os.kill(identity.pid, signal.SIGKILL)
    _wait_until(lambda: not host.is_alive(identity))

    assert host.lingers(identity)
    assert host.runs(identity)
    assert host.kill(identity)
    _wait_until(lambda: not host.runs(identity))
    _wait_until(lambda: linux_identity(server) is None)


def test_start_time_carries_the_boot_id(tmp_path: Path, host: PosixProcessHost) -> None:
    identity = _python(tmp_path, host, SLEEPER)
    boot_id, _, ticks = identity.start_time.rpartition(":")

    assert boot_id == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert ticks.isdigit()


def test_gone_and_foreign_pids_have_no_identity(tmp_path: Path, host: PosixProcessHost) -> None:
    identity = _python(tmp_path, host, "pass")
    _wait_until(lambda: host.exit_code(identity) is not None)

    assert host.identity(2**22 + 1) is None
    assert host.exit_code(identity) == 0
    assert host.identity(os.getpid()) == linux_identity(os.getpid())


def test_a_child_that_dies_at_once_gets_an_identity_that_never_matches(
    tmp_path: Path, host: PosixProcessHost
) -> None:
    identity = _python(tmp_path, host, "import os; os._exit(3)")
    _wait_until(lambda: host.exit_code(identity) is not None)

    assert not host.is_alive(identity)
    assert host.exit_code(identity) == 3


def test_a_missing_executable_raises(tmp_path: Path, host: PosixProcessHost) -> None:
    with pytest.raises(FileNotFoundError):
        host.spawn([str(tmp_path / "absent")], cwd=tmp_path, env={}, log_path=tmp_path / "x.log")


def test_ps_output_parses_into_an_identity() -> None:
    output = "S       41 Mon Jan  1 09:08:07 2024     /Applications/My App/llama-server\n"

    identity = parse_ps_identity(41, output)

    assert identity == ProcessIdentity(
        pid=41, start_time="Mon Jan 1 09:08:07 2024", executable="/Applications/My App/llama-server", group=41
    )


@pytest.mark.parametrize(
    "output",
    ["", "Z  41  Mon Jan  1 09:08:07 2024 /bin/x", "S 41 Mon Jan 1", "S x Mon Jan  1 09:08:07 2024 /b"],
)
def test_ps_output_of_a_zombie_or_junk_is_no_identity(output: str) -> None:
    assert parse_ps_identity(41, output) is None


def test_this_platform_gets_the_posix_host_and_windows_refuses_to_start() -> None:
    assert isinstance(platform_process_host(), PosixProcessHost)
    with pytest.raises(RuntimeUnavailableError):
        WindowsProcessHost()
