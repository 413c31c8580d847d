"""Instance keys on Windows: each key sealed with DPAPI for the agent's own account.

Windows has no owner-only file mode to lean on, so the key is encrypted instead: DPAPI ties the blob
to the account the agent runs as (its service account), and only that account can open it again.
The model id is passed as DPAPI's extra entropy, so a blob copied over another model's file does not
open as that model's key. The two DPAPI calls sit behind :class:`Dpapi`, so the protector is tested on
any platform with a stand-in (:class:`mirbad_runtime.testing.FakeDpapi`); the agent supplies the
pywin32 implementation on Windows.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Final

from mirbad_protocol.support import write_bytes_atomic

from ._instance_keys import _FolderKeyProtector
from .exceptions import DpapiError, InstanceKeyError

__all__ = ["Dpapi", "DpapiInstanceKeyProtector"]

_SUFFIX: Final = ".dpapi"
_ENTROPY_PREFIX: Final = b"mirbad instance key\x00"


class Dpapi(ABC):
    """The two calls of Windows' Data Protection API that the key protector needs (user scope)."""

    @abstractmethod
    def protect(self, data: bytes, entropy: bytes) -> bytes:
        """Seal ``data`` for the current account, bound to ``entropy`` (``CryptProtectData``).

        Raises:
            DpapiError: DPAPI refused.
        """

    @abstractmethod
    def unprotect(self, blob: bytes, entropy: bytes) -> bytes:
        """Open a blob :meth:`protect` made with the same ``entropy`` (``CryptUnprotectData``).

        Raises:
            DpapiError: the blob is another account's, damaged, or was sealed with other entropy.
        """


class DpapiInstanceKeyProtector(_FolderKeyProtector):
    """One DPAPI-sealed file per model (``{model_id}.dpapi``) in a folder of the agent's state.

    Args:
        folder: where the sealed keys live; created when missing.
        dpapi: the DPAPI calls (pywin32's on Windows, a stand-in in tests).
    """

    def __init__(self, folder: Path, dpapi: Dpapi) -> None:
        super().__init__(folder, _SUFFIX)
        self._dpapi = dpapi

    def save(self, model_id: str, key: str) -> None:
        """Seal ``key`` and write it atomically, replacing the model's previous one."""
        self._check_key(model_id, key)
        path = self._path(model_id)
        try:
            blob = self._dpapi.protect(key.encode("utf-8"), _entropy(model_id))
        except DpapiError as exc:
            raise InstanceKeyError(model_id, f"DPAPI could not seal the key: {exc}") from exc
        self._folder.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(path, blob)

    def load(self, model_id: str) -> str | None:
        """Open the model's sealed key; None when there is none."""
        path = self._path(model_id)
        try:
            blob = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise InstanceKeyError(model_id, f"cannot read {path}: {exc}") from exc
        try:
            data = self._dpapi.unprotect(blob, _entropy(model_id))
        except DpapiError as exc:
            # Another account's blob, a damaged file, or another model's: never use it.
            raise InstanceKeyError(model_id, f"{path} does not open with DPAPI: {exc}") from exc
        return self._key_text(model_id, path, data)


def _entropy(model_id: str) -> bytes:
    return _ENTROPY_PREFIX + model_id.encode("utf-8")
