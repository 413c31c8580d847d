"""Per-instance API keys: each native model process gets its own bearer key, kept secret at rest.

A llama-server on loopback is reachable by every local user, so the agent starts each instance with a
fresh random key (in the child's environment, never on its command line, which ``ps`` shows to all)
and its proxy presents that key upstream. The key must survive an agent restart, since an adopted model
keeps the key it was started with: an :class:`InstanceKeyProtector` stores it. POSIX nodes use
:class:`FileInstanceKeyProtector` (owner-only files); Windows nodes use
:class:`~mirbad_runtime.DpapiInstanceKeyProtector` (sealed with DPAPI for the agent's account).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Final

from mirbad_protocol import MODEL_ID_PATTERN
from mirbad_protocol.support import write_bytes_atomic

from .exceptions import InstanceKeyError

__all__ = ["FileInstanceKeyProtector", "InstanceKeyProtector", "new_instance_key"]

_KEY_BYTES: Final = 32
_MODEL_ID: Final = re.compile(MODEL_ID_PATTERN)
_FOLDER_MODE: Final = 0o700
_FILE_MODE: Final = 0o600


def new_instance_key() -> str:
    """A fresh random key: 32 bytes from :mod:`secrets`, URL-safe base64 (43 characters)."""
    return secrets.token_urlsafe(_KEY_BYTES)


class InstanceKeyProtector(ABC):
    """Keeps each model instance's API key protected at rest, keyed by model id.

    Methods block (file system, DPAPI): async callers run them in a worker thread.
    """

    @abstractmethod
    def save(self, model_id: str, key: str) -> None:
        """Store ``key`` as the key of ``model_id``, replacing any previous one."""

    @abstractmethod
    def load(self, model_id: str) -> str | None:
        """The stored key of ``model_id``, or None when there is none.

        Raises:
            InstanceKeyError: a key is stored but cannot be trusted or read back.
        """

    @abstractmethod
    def delete(self, model_id: str) -> None:
        """Forget the key of ``model_id``; forgetting a missing key does nothing."""


class _FolderKeyProtector(InstanceKeyProtector):
    """What every one-file-per-model protector shares: the folder, file names, key checks, delete.

    Subclasses say how a key is sealed on the way in and opened on the way out; the checks on the
    model id (it becomes a file name) and on the key text are the same for all of them.
    """

    def __init__(self, folder: Path, suffix: str) -> None:
        self._folder = folder
        self._suffix = suffix

    @property
    def folder(self) -> Path:
        """The folder holding the keys."""
        return self._folder

    def delete(self, model_id: str) -> None:
        """Remove the model's key file if it exists."""
        with contextlib.suppress(FileNotFoundError):
            self._path(model_id).unlink()

    def _path(self, model_id: str) -> Path:
        # The id becomes a file name, so it must never be able to climb out of the folder.
        if not _MODEL_ID.fullmatch(model_id):
            raise InstanceKeyError(model_id, "not a model id")
        return self._folder / f"{model_id}{self._suffix}"

    @staticmethod
    def _check_key(model_id: str, key: str) -> None:
        # A key read back is stripped, so one with surrounding whitespace would not round-trip.
        if not key or key.strip() != key or "\n" in key:
            raise InstanceKeyError(model_id, "a key must be non-blank text without surrounding whitespace")

    @staticmethod
    def _key_text(model_id: str, path: Path, data: bytes) -> str:
        key = data.decode("utf-8", errors="replace").strip()
        if not key:
            raise InstanceKeyError(model_id, f"{path} holds an empty key")
        return key


class FileInstanceKeyProtector(_FolderKeyProtector):
    """One owner-only (0600) file per model in an owner-only (0700) folder of the agent's state.

    On POSIX the file mode is the protection: only the agent's user (and root) can read the keys.
    A key file that others may read is refused rather than used, since the key may have leaked.

    Args:
        folder: where the key files live; created (0700) when missing.
    """

    def __init__(self, folder: Path) -> None:
        super().__init__(folder, ".key")

    def save(self, model_id: str, key: str) -> None:
        """Write the key atomically to ``{model_id}.key`` with mode 0600."""
        self._check_key(model_id, key)
        self._folder.mkdir(mode=_FOLDER_MODE, parents=True, exist_ok=True)
        write_bytes_atomic(self._path(model_id), key.encode("utf-8"), mode=_FILE_MODE)

    def load(self, model_id: str) -> str | None:
        """Read ``{model_id}.key``, refusing a file that is not owner-only."""
        path = self._path(model_id)
        try:
            with path.open("rb") as handle:
                info = os.fstat(handle.fileno())
                data = handle.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise InstanceKeyError(model_id, f"cannot read {path}: {exc}") from exc
        mode = stat.S_IMODE(info.st_mode)
        if os.name == "posix" and mode & 0o077:
            raise InstanceKeyError(model_id, f"{path} is open to other users (mode {mode:03o})")
        return self._key_text(model_id, path, data)
