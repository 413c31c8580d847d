"""The operating-system side of the process driver: spawning, identifying and signalling models.

The process driver owns the state machine and calls no OS API itself; everything that differs between
Linux, macOS and Windows sits behind :class:`ProcessHost`. A model is started detached (its own
session and process group on POSIX, its own job object on Windows) so it outlives the agent, and is
found again after an agent restart by its :class:`ProcessIdentity`: a pid alone is not enough, since
the operating system hands a freed pid to the next process.
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
        executable: the absolute path of the image the process runs, as the operating system reports it.
    """

    pid: int
    start_time: str
    executable: str


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
        """Whether the very process ``identity`` describes still runs (same pid, start and image)."""
        return self.identity(identity.pid) == identity

    @abstractmethod
    def terminate(self, identity: ProcessIdentity) -> bool:
        """Ask the process (its whole group where the OS has one) to exit; False when it no longer ran."""

    @abstractmethod
    def kill(self, identity: ProcessIdentity) -> bool:
        """End the process (its whole group) at once; False when it no longer ran."""

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
