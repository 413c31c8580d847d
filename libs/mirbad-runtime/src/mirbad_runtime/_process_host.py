"""The operating-system side of the process driver: spawning, identifying and signalling models.

The process driver owns the state machine and calls no OS API itself; everything that differs between
Linux, macOS and Windows sits behind :class:`ProcessHost`. A model is started detached (its own
session and process group on POSIX, its own job object on Windows) so it outlives the agent, and is
found again after an agent restart by its :class:`ProcessIdentity`: a pid alone is not enough, since
the operating system hands a freed pid to the next process.

The image a process runs is a weak part of that identity: a catalogued ``llama-server`` may be a
``#!/bin/sh`` wrapper that ``exec``s the real server, or a script run by its interpreter, so the image
seen at spawn (the shell, the interpreter or the final binary, depending on timing) may not be the
image seen later. Where the host created a process group for the process, the pid, the start time and
that group prove the identity and the image may change; only without a group must the image match.
"""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ProcessHost", "ProcessIdentity", "platform_process_host"]


@dataclass(frozen=True, kw_only=True)
class ProcessIdentity:
    """What tells one process apart from any later process that reuses its pid.

    Attributes:
        pid: the process id.
        start_time: when the process started, as an opaque token only ever compared for equality
            (clock ticks since boot plus the boot id on Linux, ``ps``'s start time on macOS, the
            creation FILETIME on Windows).
        executable: the absolute path of the image the process ran when it was identified, as the
            operating system reports it (after an ``exec`` in the child it may differ from the image
            the process runs now).
        group: the process group the host created for it (its pid on POSIX), or None where the
            operating system has none to report (Windows) or an older record did not keep it.
    """

    pid: int
    start_time: str
    executable: str
    group: int | None = None

    def same_process(self, live: ProcessIdentity) -> bool:
        """Whether ``live``, read now under this pid, is the very process this identity recorded.

        Pid and start time must match. With a process group on both sides the group must match too
        and the image may differ (an ``exec`` in the child keeps pid, start time and group); without
        one, the image must match.
        """
        if (live.pid, live.start_time) != (self.pid, self.start_time):
            return False
        if self.group is not None and live.group is not None:
            return live.group == self.group
        return live.executable == self.executable


class ProcessHost(ABC):
    """Spawns detached processes and finds, signals and identifies them later.

    Every method blocks (file reads, ``ps``, system calls): async callers run them with
    ``anyio.to_thread.run_sync``. Signalling methods first check the identity, so a pid that now
    belongs to another process is never signalled.
    """

    @abstractmethod
    def spawn(
        self, argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], log_path: Path
    ) -> ProcessIdentity:
        """Start ``argv`` detached from the caller, with stdout and stderr appended to ``log_path``.

        The child gets its own session and process group (a job object on Windows) and no stdin,
        so neither the agent's exit nor a signal to the agent's group reaches it.

        Args:
            argv: the executable's absolute path followed by its arguments.
            cwd: the working directory of the child.
            env: the child's complete environment (nothing is inherited beyond it).
            log_path: the file that receives both output streams; created owner-only when missing.

        Returns:
            the identity of the new process; if it died at once, an identity that no longer matches.

        Raises:
            OSError: the process could not be created (missing executable, permissions).
        """

    @abstractmethod
    def identity(self, pid: int) -> ProcessIdentity | None:
        """The identity of the live process ``pid`` now, or None when none runs under that pid.

        A zombie (exited, not yet reaped) and a process this user may not inspect count as not running.
        """

    def is_alive(self, identity: ProcessIdentity) -> bool:
        """Whether the very process ``identity`` describes still runs (see ``same_process``)."""
        live = self.identity(identity.pid)
        return live is not None and identity.same_process(live)

    def lingers(self, identity: ProcessIdentity) -> bool:
        """Whether something the host started for ``identity`` runs although the identity no longer matches.

        A wrapper that forked the real server instead of ``exec``-ing it can end and leave the server
        running in its process group. Such leftovers are stopped before the model starts again, so a
        model never runs twice. Hosts without process groups report False.
        """
        return False

    def runs(self, identity: ProcessIdentity) -> bool:
        """Whether anything of ``identity`` still runs: the process itself or what lingers of it."""
        return self.is_alive(identity) or self.lingers(identity)

    @abstractmethod
    def terminate(self, identity: ProcessIdentity) -> bool:
        """Ask the process (its whole group where the OS has one) to exit; False when nothing of it ran.

        A group that lingers after its first process ended is signalled too (see :meth:`lingers`).
        """

    @abstractmethod
    def kill(self, identity: ProcessIdentity) -> bool:
        """End the process (its whole group, lingering or not) at once; False when nothing of it ran."""

    def exit_code(self, identity: ProcessIdentity) -> int | None:
        """The exit status of a process this host spawned and saw end, else None (adopted, running)."""
        return None


def platform_process_host() -> ProcessHost | None:
    """The process host of this operating system, or None where there is none (then no process driver).

    Linux and macOS share the POSIX host; Windows has its own. Imports are deferred so a platform
    never loads the other's modules.
    """
    # A plain string, so the choice is made at run time and type-checks on every platform.
    platform: str = sys.platform
    if platform == "win32":
        from ._process_host_windows import WindowsProcessHost

        return WindowsProcessHost()
    if platform.startswith("linux") or platform == "darwin":
        from ._process_host_posix import PosixProcessHost

        return PosixProcessHost()
    return None
