"""Write, read back and delete a file as the backup account, on a thread of its own.

hostd is root: its file capabilities (CAP_DAC_OVERRIDE, CAP_FOWNER) would let it write where the
master, an unprivileged account, cannot, and hide exactly the permission problem the probe is there
to find. Linux drops those capabilities from a thread whose file-system uid is not 0, and
setfsuid/setfsgid change that uid for the calling thread only, so the probe runs on a new thread
that takes the account's ids, does its three steps, and ends; no other thread ever runs as it.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import threading
from pathlib import Path
from typing import Final

from .exceptions import MountProbeError

__all__ = ["probe_write_as"]

_ASK: Final = 0xFFFFFFFF  # an invalid id: setfsuid changes nothing and returns the current one
_PAYLOAD_BYTES: Final = 4096


def probe_write_as(folder: Path, uid: int, gid: int, *, timeout_s: float) -> None:
    """Write a file into ``folder``, read it back and delete it as ``uid``:``gid``.

    Blocking: async callers run it with ``anyio.to_thread.run_sync``. A share that hangs leaves the
    probe thread behind (a daemon thread, still as the account) and is reported as a failure.

    Raises:
        MountProbeError: a step failed (its OS error is in the message) or did not end in time.
    """
    outcome: list[BaseException | None] = []
    thread = threading.Thread(
        target=_run_as, args=(folder, uid, gid, outcome), name="mirbad-hostd-probe", daemon=True
    )
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise MountProbeError(f"writing to the share as {uid}:{gid} did not end within {timeout_s:g} s")
    error = outcome[0] if outcome else MountProbeError("the probe thread ended without a result")
    if isinstance(error, MountProbeError):
        raise error
    if error is not None:
        raise MountProbeError(f"the probe failed: {error}")


def _run_as(folder: Path, uid: int, gid: int, outcome: list[BaseException | None]) -> None:
    try:
        _switch(uid, gid)
        _write_read_delete(folder, uid, gid)
    except BaseException as exc:  # handed to the caller's thread, which raises it
        outcome.append(exc)
    else:
        outcome.append(None)


def _switch(uid: int, gid: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    # The group first: once the uid is not 0 the thread may no longer change its group.
    libc.setfsgid(ctypes.c_uint(gid))
    libc.setfsuid(ctypes.c_uint(uid))
    current_gid = libc.setfsgid(ctypes.c_uint(_ASK))
    current_uid = libc.setfsuid(ctypes.c_uint(_ASK))
    if (current_uid, current_gid) != (uid, gid):
        raise MountProbeError(f"could not take the ids {uid}:{gid} (now {current_uid}:{current_gid})")


def _write_read_delete(folder: Path, uid: int, gid: int) -> None:
    payload = secrets.token_bytes(_PAYLOAD_BYTES)
    probe = folder / f".mirbad-probe-{secrets.token_hex(8)}"
    step = "write"
    try:
        descriptor = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(descriptor, payload)
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        step = "read back"
        if probe.read_bytes() != payload:
            raise MountProbeError(f"the file written as {uid}:{gid} read back different bytes")
        step = "delete"
        probe.unlink()
    except OSError as exc:
        raise MountProbeError(f"could not {step} a file as {uid}:{gid}: {exc.strerror or exc}") from None
