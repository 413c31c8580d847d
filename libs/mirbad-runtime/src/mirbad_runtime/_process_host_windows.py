"""The process host of Windows: each model in its own job object, without kill-on-close.

A job object groups the model with any children it starts, so :meth:`WindowsProcessHost.kill` ends
them together. The job deliberately lacks ``JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE``: when the agent exits,
restarts or is upgraded, its job handles close and the model keeps running, to be adopted by pid,
creation time and image path.

This module cannot be exercised on the Linux CI: it imports anywhere (so the package imports
everywhere) and touches kernel32 only on Windows, where it is type-checked with ``mypy --platform
win32``. Windows has no SIGTERM for a windowless process, so :meth:`~WindowsProcessHost.terminate`
ends the job as :meth:`~WindowsProcessHost.kill` does.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from ctypes import wintypes
from pathlib import Path
from typing import Any, Final

from ._process_host import ProcessHost, ProcessIdentity
from .exceptions import RuntimeUnavailableError

__all__ = ["WindowsProcessHost"]

_PROCESS_TERMINATE: Final = 0x0001
_PROCESS_SET_QUOTA: Final = 0x0100
_PROCESS_QUERY_LIMITED_INFORMATION: Final = 0x1000
_SYNCHRONIZE: Final = 0x00100000
_WAIT_TIMEOUT: Final = 0x102
_CREATE_NEW_PROCESS_GROUP: Final = 0x00000200
_CREATE_NO_WINDOW: Final = 0x08000000
_EXIT_CODE: Final = 1


def _kernel32() -> Any:
    if sys.platform == "win32":
        return ctypes.WinDLL("kernel32", use_last_error=True)
    raise RuntimeUnavailableError("the Windows process host runs on Windows only")


def _last_error(action: str) -> OSError:
    code = 0
    if sys.platform == "win32":
        code = ctypes.get_last_error()
    return OSError(code, f"{action} failed")


class WindowsProcessHost(ProcessHost):
    """Starts each model with a job object of its own and identifies it by creation time and image.

    Raises:
        RuntimeUnavailableError: constructed on another operating system.
    """

    def __init__(self) -> None:
        self._kernel32 = _kernel32()
        self._lock = threading.Lock()
        # Job handles of the models this agent process started; an adopted model has none here.
        self._jobs: dict[int, int] = {}
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    def spawn(
        self, argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], log_path: Path
    ) -> ProcessIdentity:
        """Start ``argv`` in a new process group and a new job, output appended to ``log_path``."""
        log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_BINARY", 0))
        try:
            process = subprocess.Popen(
                list(argv),
                cwd=cwd,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=log_fd,
                stderr=subprocess.STDOUT,
                creationflags=_CREATE_NEW_PROCESS_GROUP | _CREATE_NO_WINDOW,
                close_fds=True,
            )
        finally:
            os.close(log_fd)
        job = self._new_job(process.pid)
        with self._lock:
            self._jobs[process.pid] = job
            self._children[process.pid] = process
        found = self.identity(process.pid)
        if found is not None:
            return found
        return ProcessIdentity(pid=process.pid, start_time="exited", executable=os.path.realpath(argv[0]))

    def identity(self, pid: int) -> ProcessIdentity | None:
        """Creation time (FILETIME) and full image path of a live ``pid``."""
        access = _PROCESS_QUERY_LIMITED_INFORMATION | _SYNCHRONIZE
        handle = self._kernel32.OpenProcess(access, False, pid)
        if not handle:
            return None
        try:
            if self._kernel32.WaitForSingleObject(handle, 0) != _WAIT_TIMEOUT:
                return None  # signalled: the process has exited
            created, exited, kernel, user = (wintypes.FILETIME() for _ in range(4))
            times = (ctypes.byref(created), ctypes.byref(exited), ctypes.byref(kernel), ctypes.byref(user))
            if not self._kernel32.GetProcessTimes(handle, *times):
                return None
            buffer = ctypes.create_unicode_buffer(32768)
            size = wintypes.DWORD(len(buffer))
            if not self._kernel32.QueryFullProcessImageNameW(handle, 0, buffer, ctypes.byref(size)):
                return None
            start = (int(created.dwHighDateTime) << 32) | int(created.dwLowDateTime)
            return ProcessIdentity(pid=pid, start_time=str(start), executable=buffer.value)
        finally:
            self._kernel32.CloseHandle(handle)

    def terminate(self, identity: ProcessIdentity) -> bool:
        """End the model's job (Windows offers no polite stop for a process without a window)."""
        return self.kill(identity)

    def kill(self, identity: ProcessIdentity) -> bool:
        """Terminate the job this agent created, or the process alone when it was adopted."""
        if not self.is_alive(identity):
            return False
        with self._lock:
            job = self._jobs.get(identity.pid)
        if job is not None:
            return bool(self._kernel32.TerminateJobObject(job, _EXIT_CODE))
        # An adopted model: its job handle died with the previous agent, so end the process itself.
        handle = self._kernel32.OpenProcess(_PROCESS_TERMINATE, False, identity.pid)
        if not handle:
            return False
        try:
            return bool(self._kernel32.TerminateProcess(handle, _EXIT_CODE))
        finally:
            self._kernel32.CloseHandle(handle)

    def exit_code(self, identity: ProcessIdentity) -> int | None:
        """The exit status of a model this agent process started, once it has ended."""
        with self._lock:
            process = self._children.get(identity.pid)
        return None if process is None else process.poll()

    def _new_job(self, pid: int) -> int:
        # No limits are set at all: in particular not KILL_ON_JOB_CLOSE, so the model outlives us.
        job = self._kernel32.CreateJobObjectW(None, None)
        if not job:
            raise _last_error("CreateJobObjectW")
        handle = self._kernel32.OpenProcess(_PROCESS_SET_QUOTA | _PROCESS_TERMINATE, False, pid)
        try:
            if not handle or not self._kernel32.AssignProcessToJobObject(job, handle):
                raise _last_error(f"putting process {pid} into its job")
        finally:
            if handle:
                self._kernel32.CloseHandle(handle)
        return int(job)
