"""The format of ``{data_dir}/api-keys.json`` and the rules for merging restored key records.

The document is ``{"schemaVersion": 1, "requireKeys": bool, "keys": [record, ...]}`` with one
:class:`~mirbad_protocol.admin.ApiKeyRecord` per key, written in full (nulls included). Every field is
required when read, so a truncated or emptied file is refused rather than taken for "no keys".

Secrets are stored as a plain SHA-256: a secret carries 256 random bits, so neither a salt nor a slow
KDF adds anything, and without a per-install pepper a key restored from a backup on a new machine
keeps working (the hash is the key's identity across installs).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from pydantic import ValidationError

from mirbad_orchestration.exceptions import ApiKeyStoreError
from mirbad_protocol import WireModel, field_error_from_validation
from mirbad_protocol.admin import ApiKeyRecord
from mirbad_protocol.support import BeforeReplace, remove_stale_temp_files, write_json_atomic

__all__ = ["API_KEYS_FILE", "ApiKeyImport", "secret_sha256"]

API_KEYS_FILE: Final = "api-keys.json"
"""The key store's file name in the master's data directory."""


class KeyFile(WireModel):
    """The whole ``api-keys.json`` document."""

    schema_version: Literal[1]
    require_keys: bool
    keys: tuple[ApiKeyRecord, ...]


EMPTY_KEY_FILE: Final = KeyFile(schema_version=1, require_keys=False, keys=())
"""What a missing file means: a fresh install, open until its first key is created."""


@dataclass(frozen=True)
class ApiKeyImport:
    """What merging restored key records did (or, in a dry run, would do).

    Attributes:
        added: ids of the records that were new here and were added.
        unchanged: ids of the records already here with the same id and secret (left as they are).
        conflicts: ids of the records whose id or secret belongs to a different key here (skipped).
    """

    added: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()


def secret_sha256(secret: str) -> str:
    """Return the lowercase hex SHA-256 of a key's secret, the only form in which it is stored."""
    # surrogatepass: a bearer header may carry a lone surrogate; it must hash (to nothing known), not crash.
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def decode_key_file(path: Path, raw: bytes) -> KeyFile:
    """Read ``api-keys.json``'s bytes.

    Raises:
        ApiKeyStoreError: the bytes are not a key document, or two records share an id or a hash; the
            message names ``path`` and the offending field.
    """
    try:
        document = KeyFile.model_validate_json(raw)
    except ValidationError as exc:
        raise ApiKeyStoreError(path, f"not an API key file: {field_error_from_validation(exc)}") from None
    _check_unique(path, document.keys)
    return document


def encode_key_file(document: KeyFile) -> dict[str, object]:
    """Return the JSON document to write, every field included."""
    return document.model_dump(mode="json", by_alias=True)


def plan_import(
    existing: Sequence[ApiKeyRecord], incoming: Iterable[ApiKeyRecord]
) -> tuple[ApiKeyImport, tuple[ApiKeyRecord, ...]]:
    """Decide which restored records to add: those whose id and hash are both unknown here.

    A key already here is never changed by a restore (the local copy may have been revoked or
    renamed since the backup), and a record that shares only its id or only its hash with a local key
    is a conflict, skipped, so that one id never names two secrets.

    Returns:
        The outcome, and the records to append in their incoming order.
    """
    by_id = {record.id: record for record in existing}
    by_hash = {record.secret_sha256: record for record in existing}
    added: list[ApiKeyRecord] = []
    unchanged: list[str] = []
    conflicts: list[str] = []
    for record in incoming:
        same_id, same_hash = by_id.get(record.id), by_hash.get(record.secret_sha256)
        if same_id is None and same_hash is None:
            added.append(record)
            by_id[record.id] = by_hash[record.secret_sha256] = record
        elif same_id is same_hash:
            unchanged.append(record.id)
        else:
            conflicts.append(record.id)
    outcome = ApiKeyImport(tuple(record.id for record in added), tuple(unchanged), tuple(conflicts))
    return outcome, tuple(added)


def _check_unique(path: Path, records: Sequence[ApiKeyRecord]) -> None:
    ids: set[str] = set()
    hashes: set[str] = set()
    for index, record in enumerate(records):
        if record.id in ids:
            raise ApiKeyStoreError(path, f"keys[{index}].id: {record.id!r} repeats an earlier key's id")
        if record.secret_sha256 in hashes:
            raise ApiKeyStoreError(path, f"keys[{index}].secretSha256: repeats an earlier key's hash")
        ids.add(record.id)
        hashes.add(record.secret_sha256)


def read_store_file(path: Path) -> bytes | None:
    """Return the bytes of one of the store's files, or None when it does not exist yet.

    Temporary files a crashed writer left beside it are removed first (the store is the only writer).

    Raises:
        ApiKeyStoreError: the file exists but cannot be read.
    """
    with contextlib.suppress(OSError):
        remove_stale_temp_files(path)
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ApiKeyStoreError(path, f"cannot read: {exc.strerror or exc}") from exc


def write_store_file(path: Path, document: object, before_replace: BeforeReplace | None = None) -> None:
    """Replace one of the store's files atomically, owner-only (0600), creating its folder if needed.

    Raises:
        ApiKeyStoreError: the file cannot be written; its previous content is intact.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, document, before_replace=before_replace)
    except OSError as exc:
        # A full disk (or quota) is the operator's to fix, not a bug: 507 at the admin API, as for the
        # registry (the test of stores.is_disk_full; keys may not import stores).
        full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
        raise ApiKeyStoreError(path, f"cannot write: {exc.strerror or exc}", disk_full=full) from exc
