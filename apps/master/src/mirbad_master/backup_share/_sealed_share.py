"""The share as the master remembers it: its non-secret settings, and its password sealed at rest.

The password has to come back in clear text (a passphrase backup carries it, so a restored master can
mount the share again), so it cannot be hashed; it is encrypted instead. The key is 32 random bytes in
its own file (``backup-share.key``, 0600, made once with ``O_EXCL``) beside the record
(``backup-share.json``, 0600), and the cipher is AES-256-GCM from ``cryptography`` with a fresh 96-bit
nonce per write and the record's format as associated data. A separate key file keeps the password
out of anything that copies or shows the record alone (a support bundle, a backup written without a
passphrase, a log of the file), and GCM refuses a record that was altered instead of decrypting it to
garbage. It does not protect against someone who can read the whole data directory: nothing on one
machine can without an operator's secret, which a scheduled backup at night cannot ask for.

Besides the settings, the record says whether a share is configured, as the master last learned it, so
the scheduler can still tell "a share should be mounted here" when the agent stops answering.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import anyio
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from mirbad_master.exceptions import ApiError
from mirbad_protocol.admin import AdminErrorCode
from mirbad_protocol.hostd import BackupShareSettings
from mirbad_protocol.support import write_json_atomic

__all__ = ["KEY_FILE", "RECORD_FILE", "SealedShareStore", "ShareRecord"]

RECORD_FILE: Final = "backup-share.json"
"""The record's name in the data directory."""
KEY_FILE: Final = "backup-share.key"
"""The sealing key's name in the data directory."""

_FORMAT: Final = "mirbad-backup-share/1"
_AAD: Final = _FORMAT.encode()
_NONCE_BYTES: Final = 12


@dataclass(frozen=True)
class ShareRecord:
    """What the master keeps about the backup share.

    Attributes:
        share: the share's settings without the password; None before the first apply.
        configured: whether a share is mounted by hostd, as the master last learned it.
        has_password: whether a sealed password is kept.
    """

    share: BackupShareSettings | None = None
    configured: bool = False
    has_password: bool = False


class SealedShareStore:
    """The record and its key in ``data_dir``; every write is atomic, the store serialises its own.

    Args:
        data_dir: the master's data directory.
    """

    def __init__(self, data_dir: Path) -> None:
        self._record = data_dir / RECORD_FILE
        self._key = data_dir / KEY_FILE
        self._lock = anyio.Lock()

    async def read(self) -> ShareRecord:
        """The record (an empty one when there is none yet)."""
        raw = await anyio.to_thread.run_sync(self._load)
        share = raw.get("share")
        return ShareRecord(
            share=BackupShareSettings.from_wire(share) if share is not None else None,
            configured=bool(raw.get("configured", False)),
            has_password="sealed" in raw,
        )

    async def keep(self, share: BackupShareSettings, password: str | None) -> None:
        """Remember ``share`` as configured, with ``password`` sealed (None: keep no password)."""
        async with self._lock:
            document: dict[str, object] = {
                "format": _FORMAT,
                "share": share.to_wire(),
                "configured": True,
            }
            if password is not None:
                document["sealed"] = await anyio.to_thread.run_sync(self._seal, password)
            await anyio.to_thread.run_sync(lambda: write_json_atomic(self._record, document, mode=0o600))

    async def note_configured(self, configured: bool, share: BackupShareSettings | None = None) -> None:
        """Record what hostd last said: whether a share is configured, and which (no password known).

        A share hostd reports that the master has no record of (applied before this data directory, or
        by hand) is recorded too, so the scheduler still knows of it when the agent stops answering.
        """
        async with self._lock:
            raw = await anyio.to_thread.run_sync(self._load)
            if bool(raw.get("configured", False)) == configured:
                return
            if not raw:
                raw = {"format": _FORMAT, "share": share.to_wire() if share is not None else None}
            raw["configured"] = configured
            await anyio.to_thread.run_sync(lambda: write_json_atomic(self._record, raw, mode=0o600))

    async def forget(self) -> None:
        """Drop the record (the key stays: it seals the next share's password)."""
        async with self._lock:
            await anyio.to_thread.run_sync(lambda: self._record.unlink(missing_ok=True))

    async def password(self) -> str | None:
        """The share's password in clear text, or None when none is kept.

        Raises:
            ApiError: 500 ``storage_error``: the record or its key is unreadable or was altered.
        """
        raw = await anyio.to_thread.run_sync(self._load)
        sealed = raw.get("sealed")
        if sealed is None:
            return None
        return await anyio.to_thread.run_sync(self._open, sealed)

    def _load(self) -> dict[str, object]:
        try:
            text = self._record.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        try:
            raw = json.loads(text)
        except ValueError:
            raise _broken(f"{self._record} is not JSON") from None
        if not isinstance(raw, dict) or raw.get("format") != _FORMAT:
            raise _broken(f"{self._record} is not a backup share record")
        return raw

    def _seal(self, password: str) -> dict[str, str]:
        nonce = secrets.token_bytes(_NONCE_BYTES)
        sealed = AESGCM(self._key_bytes(create=True)).encrypt(nonce, password.encode(), _AAD)
        return {"nonce": _b64(nonce), "ciphertext": _b64(sealed)}

    def _open(self, sealed: object) -> str:
        if not isinstance(sealed, dict):
            raise _broken(f"{self._record}: the sealed password is malformed")
        try:
            nonce = base64.b64decode(str(sealed["nonce"]), validate=True)
            ciphertext = base64.b64decode(str(sealed["ciphertext"]), validate=True)
            return AESGCM(self._key_bytes(create=False)).decrypt(nonce, ciphertext, _AAD).decode()
        except (KeyError, ValueError, InvalidTag):
            # One message whatever failed: never a hint at the password or a part of it.
            raise _broken(f"{self._record}: the sealed password cannot be opened with {self._key}") from None

    def _key_bytes(self, *, create: bool) -> bytes:
        try:
            key = self._key.read_bytes()
        except FileNotFoundError:
            if not create:
                raise _broken(f"{self._key} is missing") from None
            return self._new_key()
        if len(key) != 32:
            raise _broken(f"{self._key} is not a 256-bit key")
        return key

    def _new_key(self) -> bytes:
        key = AESGCM.generate_key(bit_length=256)
        try:
            # O_EXCL: two first writers cannot each make a key and seal with the one that loses.
            fd = os.open(self._key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return self._key_bytes(create=False)
        with os.fdopen(fd, "wb") as file:
            file.write(key)
            file.flush()
            os.fsync(file.fileno())
        return key


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _broken(message: str) -> ApiError:
    return ApiError(500, AdminErrorCode.STORAGE_ERROR, message)
