"""The process host of Linux and macOS: a new session per model, signals to its process group.

Identities come from ``/proc/<pid>/stat`` and ``/proc/<pid>/exe`` on Linux and from ``ps`` on macOS,
with the process group: every model leads the group its ``setsid`` made, which survives an ``exec`` in
the child (a wrapper script that ``exec``s llama-server), so the image is not needed to tell it apart.
Only the Linux reader is exercised by the test suite; the macOS reader is kept to one ``ps`` call whose
output parser is tested on sample text.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final

from ._process_host import ProcessHost, ProcessIdentity

__all__ = ["PosixProcessHost"]

_PS_TIMEOUT_S: Final = 5.0
# Between losing its image and becoming a reapable zombie, an exiting child takes a moment.
_EXIT_GRACE_S: Final = 1.0
_DELETED_SUFFIX: Final = " (deleted)"

# Children spawned by any host in this process, kept process-wide so a discarded host (an agent
# restarted in-process) can still reap them, and so a Popen never meets the garbage collector while
# its child runs (which warns).
_children: dict[int, subprocess.Popen[bytes]] = {}
_exit_codes: dict[int, int] = {}
_children_lock = threading.Lock()

IdentityReader = Callable[[int], ProcessIdentity | None]
"""Reads the identity of a live pid, or None."""


class PosixProcessHost(ProcessHost):
    """Spawns each model in its own session (``setsid``) and signals its whole process group.

    Args:
        reader: how to read a pid's identity; by default ``/proc`` on Linux and ``ps`` elsewhere.
    """

    def __init__(self, reader: IdentityReader | None = None) -> None:
        self._reader = reader or (linux_identity if sys.platform.startswith("linux") else macos_identity)

    def spawn(
        self, argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], log_path: Path
    ) -> ProcessIdentity:
        """Start ``argv`` in a new session with both output streams appended to ``log_path``."""
        log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            process = subprocess.Popen(
                list(argv),
                cwd=cwd,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=log_fd,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
        finally:
            os.close(log_fd)
        with _children_lock:
            _children[process.pid] = process
        found = self._reader(process.pid)
        if found is not None:
            return found
        # It already ended: an identity that can never match a live process, so it reads as Failed.
        return ProcessIdentity(
            pid=process.pid, start_time="exited", executable=os.path.realpath(argv[0]), group=process.pid
        )

    def identity(self, pid: int) -> ProcessIdentity | None:
        """The identity of ``pid`` from the process table, reaping it if it is our ended child."""
        _reap(pid)
        found = self._reader(pid)
        if found is None:
            # Collect the exit status of our own child now, so the Failed status can report it.
            _reap(pid, grace_s=_EXIT_GRACE_S)
        return found

    def terminate(self, identity: ProcessIdentity) -> bool:
        """Send SIGTERM to the model's process group."""
        return self._signal_group(identity, signal.SIGTERM)

    def kill(self, identity: ProcessIdentity) -> bool:
        """Send SIGKILL to the model's process group."""
        return self._signal_group(identity, signal.SIGKILL)

    def lingers(self, identity: ProcessIdentity) -> bool:
        """Whether something this host started for ``identity`` runs although the identity no longer matches.

        Either the process itself, changed (same pid and start time, another group: it called
        ``setsid`` itself), or members of its process group after it ended (a wrapper that forked the
        server instead of ``exec``-ing it).
        """
        live = self._reader(identity.pid)
        if live is not None:
            # A pid someone else runs now (another start time) names their group, not ours: the kernel
            # never hands out a pid that still names a process group, so ours has no members left.
            return live.start_time == identity.start_time and not identity.same_process(live)
        return _group_has_members(identity.group or identity.pid)

    def exit_code(self, identity: ProcessIdentity) -> int | None:
        """The exit status of a child of this agent process once it has ended (negative: a signal)."""
        _reap(identity.pid)
        with _children_lock:
            return _exit_codes.get(identity.pid)

    def _signal_group(self, identity: ProcessIdentity, signum: signal.Signals) -> bool:
        if not self.runs(identity):
            return False
        signalled = False
        if not self.is_alive(identity) and self._reader(identity.pid) is not None:
            # Ours but changed (see lingers): it may have left the group, so it is signalled itself.
            with contextlib.suppress(ProcessLookupError):
                os.kill(identity.pid, signum)
                signalled = True
        with contextlib.suppress(ProcessLookupError):
            # The model is its session's and group's leader (setsid), so its pid names the group.
            os.killpg(identity.group or identity.pid, signum)
            signalled = True
        return signalled


def _group_has_members(group: int) -> bool:
    """Whether a live (not zombie) process is in process group ``group``."""
    if not sys.platform.startswith("linux"):
        try:
            # Signal 0 checks only; a zombie member still counts here, which errs towards stopping it.
            os.killpg(group, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is not None and fields[0] not in ("Z", "X") and fields[2] == str(group):
            return True
    return False


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first), or None when gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    # The command name in parentheses may itself hold spaces and parentheses; fields follow the last ')'.
    return stat[stat.rfind(")") + 2 :].split()


def _reap(pid: int, *, grace_s: float = 0.0) -> None:
    with _children_lock:
        process = _children.get(pid)
    if process is None:
        return
    try:
        # Popen serializes its own waits, so two threads reaping one child is safe.
        returncode = process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        return
    with _children_lock:
        _children.pop(pid, None)
        _exit_codes[pid] = returncode


def linux_identity(pid: int) -> ProcessIdentity | None:
    """Read a live pid's identity from ``/proc``: boot id + start ticks, process group, executable link."""
    fields = _stat_fields(pid)
    try:
        executable = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        # Gone, a zombie (its exe link is unreadable) or another user's process: not one of ours.
        return None
    if fields is None or len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    # An upgrade that replaced the binary leaves the running image marked deleted; it is still the model.
    executable = executable.removesuffix(_DELETED_SUFFIX)
    return ProcessIdentity(
        pid=pid, start_time=f"{_boot_id()}:{fields[19]}", executable=executable, group=int(fields[2])
    )


@functools.cache
def _boot_id() -> str:
    # Start ticks count from boot, so a pid and tick count can repeat after a reboot; the boot id cannot.
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
    except OSError:
        return "unknown-boot"


def macos_identity(pid: int) -> ProcessIdentity | None:
    """Read a live pid's identity with ``ps`` (state, group, start time to the second, executable path)."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        result = subprocess.run(
            ["/bin/ps", "-o", "stat=,pgid=,lstart=,comm=", "-p", str(pid)],
            capture_output=True,
            text=True,
            timeout=_PS_TIMEOUT_S,
            check=False,
            env={"LC_ALL": "C", "PATH": "/usr/bin:/bin"},
        )
        if result.returncode == 0:
            return parse_ps_identity(pid, result.stdout)
    return None


def parse_ps_identity(pid: int, output: str) -> ProcessIdentity | None:
    """Parse ``ps -o stat=,pgid=,lstart=,comm=`` output (C locale) into an identity; None: zombie, junk.

    ``lstart`` is always five words (``Mon Jan  1 00:00:00 2024``) and ``comm`` is the rest of the line,
    so an executable path with spaces survives.
    """
    parts = output.strip().split(maxsplit=7)
    if len(parts) != 8 or parts[0].startswith("Z") or not parts[1].isdigit():
        return None
    return ProcessIdentity(pid=pid, start_time=" ".join(parts[2:7]), executable=parts[7], group=int(parts[1]))
