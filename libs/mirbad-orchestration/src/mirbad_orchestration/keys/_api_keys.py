"""The API key store: keys for the /v1 endpoint, created once, kept hashed, with their usage.

Keys live in ``{data_dir}/api-keys.json`` (owner-only, written atomically under one lock; see
``_api_key_file``); usage counted by the router lives in ``{data_dir}/api-key-usage.json`` (see
``_api_key_usage``). Both fail closed: a file that cannot be read raises :class:`ApiKeyStoreError` on
every call that needs it and is never overwritten or re-seeded.

Whether /v1 needs a key is a stored setting, ``requireKeys``: a fresh install (no file) is open so
it works locally at once; creating or restoring the first key turns it on, and only an explicit
:meth:`ApiKeyStore.set_keys_required` turns it off again, so revoking or deleting every key never
silently opens the endpoint.
"""

from __future__ import annotations

import builtins
import logging
import secrets
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Final, NoReturn, Self

import anyio
import anyio.to_thread

from mirbad_orchestration.exceptions import (
    ApiKeyStoreError,
    UnknownApiKeyError,
)
from mirbad_protocol.admin import (
    API_KEY_SECRET_PREFIX,
    ApiKeyCreate,
    ApiKeyCreated,
    ApiKeyInfo,
    ApiKeyRecord,
    KeyUsage,
)
from mirbad_protocol.support import BeforeReplace

from ._api_key_file import (
    API_KEYS_FILE,
    EMPTY_KEY_FILE,
    ApiKeyImport,
    KeyFile,
    decode_key_file,
    encode_key_file,
    plan_import,
    read_store_file,
    secret_sha256,
    write_store_file,
)
from ._api_key_ledger import UsageLedger
from ._api_key_usage import API_KEY_USAGE_FILE, DEFAULT_MAX_MODELS_PER_KEY
from ._verification import find_api_key

__all__ = ["DEFAULT_USAGE_FLUSH_SECONDS", "ApiKeyStore"]

DEFAULT_USAGE_FLUSH_SECONDS: Final = 30.0
"""How often counted usage is added to the usage file: at most this much is lost in a crash."""

_SECRET_BYTES: Final = 32
_ID_BYTES: Final = 6
# "mb-" and six random characters: enough to tell keys apart, 36 of the secret's 256 bits.
_PREFIX_LENGTH: Final = len(API_KEY_SECRET_PREFIX) + 6
_MAX_SERVED_NAME: Final = 200

logger = logging.getLogger(__name__)

Clock = Callable[[], datetime]


class ApiKeyStore:
    """The master's API keys and their usage.

    Key changes are written at once; usage is counted in memory by :meth:`record_usage` and added to
    the usage file by :meth:`flush_usage`, which :meth:`run_usage_flusher` calls on a cadence and
    leaving ``async with`` (or :meth:`aclose`) calls once more. The store must be the only writer of
    its files.

    Args:
        data_dir: the master's data directory.
        clock: the source of the current time (aware UTC); tests inject a fake one.
        flush_interval: seconds between usage flushes in :meth:`run_usage_flusher`.
        max_models_per_key: served names whose usage is kept apart per key (see ``OTHER_MODELS``).
        before_replace: test seam passed to :func:`write_json_atomic` for both files.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        clock: Clock | None = None,
        flush_interval: float = DEFAULT_USAGE_FLUSH_SECONDS,
        max_models_per_key: int = DEFAULT_MAX_MODELS_PER_KEY,
        before_replace: BeforeReplace | None = None,
    ) -> None:
        self._path = data_dir / API_KEYS_FILE
        self._usage_path = data_dir / API_KEY_USAGE_FILE
        self._clock = clock or _utc_now
        self._flush_interval = flush_interval
        self._before_replace = before_replace
        self._lock = anyio.Lock()
        self._keys: KeyFile | None = None
        self._by_id: dict[str, ApiKeyRecord] = {}
        # The ledger's own lock is only ever taken after self._lock, never before it.
        self._ledger = UsageLedger(
            self._usage_path, max_models=max_models_per_key, before_replace=before_replace
        )

    @property
    def path(self) -> Path:
        """The key file."""
        return self._path

    @property
    def usage_path(self) -> Path:
        """The usage file."""
        return self._usage_path

    async def __aenter__(self) -> Self:
        await self._document()  # fail at start-up, not on the first request, if the file is broken
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def create(self, request: ApiKeyCreate) -> ApiKeyCreated:
        """Create a key; the returned secret is shown once and never stored in clear.

        Raises:
            InvalidFieldError: ``expiresAt`` is not in the future.
            ApiKeyStoreError: the key file cannot be read or written; nothing changed.
        """
        secret = API_KEY_SECRET_PREFIX + secrets.token_urlsafe(_SECRET_BYTES)
        async with self._lock:
            document = await self._loaded()
            now = self._clock()
            request.check_expiry(now)
            record = ApiKeyRecord(
                id=_new_id(self._by_id),
                name=request.name,
                prefix=secret[:_PREFIX_LENGTH],
                secret_sha256=secret_sha256(secret),
                allowed_models=request.allowed_models,
                expires_at=request.expires_at,
                requests_per_minute=request.requests_per_minute,
                tokens_per_minute=request.tokens_per_minute,
                created_at=now,
            )
            await self._save(KeyFile(schema_version=1, require_keys=True, keys=(*document.keys, record)))
        return ApiKeyCreated(**record.info().model_dump(), secret=secret)

    async def list(self) -> builtins.list[ApiKeyInfo]:
        """Return every key (revoked ones included) in creation order.

        Raises:
            ApiKeyStoreError: the key file or the usage file cannot be read.
        """
        document = await self._document()
        book = await self._ledger.book()
        return [record.info(book.last_used_at(record.id)) for record in document.keys]

    async def get(self, key_id: str) -> ApiKeyInfo:
        """Return the key ``key_id``.

        Raises:
            UnknownApiKeyError: no key has that id.
            ApiKeyStoreError: the key file or the usage file cannot be read.
        """
        record = _find(await self._document(), key_id)
        return record.info((await self._ledger.book()).last_used_at(key_id))

    async def revoke(self, key_id: str) -> ApiKeyInfo:
        """Stop ``key_id`` from authenticating, keeping its record and usage; revoking twice is a no-op.

        Raises:
            UnknownApiKeyError: no key has that id.
            ApiKeyStoreError: the key file cannot be read or written; nothing changed.
        """
        async with self._lock:
            document = await self._loaded()
            record = _find(document, key_id)
            if record.revoked_at is None:
                record = record.model_copy(update={"revoked_at": self._clock()})
                keys = tuple(record if old.id == key_id else old for old in document.keys)
                await self._save(document.model_copy(update={"keys": keys}))
        return record.info(self._ledger.known_last_use(key_id))

    async def delete(self, key_id: str) -> ApiKeyInfo:
        """Remove ``key_id`` and its usage history; whether keys are required does not change.

        Raises:
            UnknownApiKeyError: no key has that id.
            ApiKeyStoreError: the key file cannot be read or written; nothing changed.
        """
        async with self._lock:
            document = await self._loaded()
            record = _find(document, key_id)
            last_used = self._ledger.known_last_use(key_id)
            keys = tuple(old for old in document.keys if old.id != key_id)
            await self._save(document.model_copy(update={"keys": keys}))
            self._ledger.forget(key_id)
        return record.info(last_used)

    async def find_by_secret(self, secret: str) -> ApiKeyInfo | None:
        """Return the key whose secret is ``secret`` as it stands (revoked or expired alike), or None.

        The lookup is :func:`find_api_key` (``keys/_verification.py``). It reads no clock and refuses
        nothing: whether the key may be used now is its caller's decision (the router's, for expiry),
        made with the caller's clock, which then reports the use through :meth:`mark_used`.

        Raises:
            ApiKeyStoreError: the key file cannot be read.
        """
        record = find_api_key((await self._document()).keys, secret)
        if record is None:
            return None
        return record.info(self._ledger.known_last_use(record.id))

    def mark_used(self, key_id: str, at: datetime) -> None:
        """Record that ``key_id`` was let in at ``at`` (in memory, no I/O; saved with the usage).

        A key that does not exist (deleted meanwhile) is not marked.
        """
        if key_id in self._by_id:
            self._ledger.touch(key_id, at)

    async def keys_required(self) -> bool:
        """Say whether /v1 requests must carry a key (see the module docstring).

        Raises:
            ApiKeyStoreError: the key file cannot be read (callers must then refuse, not open up).
        """
        return (await self._document()).require_keys

    async def set_keys_required(self, required: bool) -> None:
        """Require keys on /v1, or stop requiring them: an explicit administrator decision.

        Raises:
            ApiKeyStoreError: the key file cannot be read or written; nothing changed.
        """
        async with self._lock:
            document = await self._loaded()
            if document.require_keys != required:
                await self._save(document.model_copy(update={"require_keys": required}))

    def record_usage(self, key_id: str, served_name: str, prompt_tokens: int, completion_tokens: int) -> None:
        """Count one finished request of ``key_id`` on ``served_name`` (in memory, no I/O).

        A key that does not exist (deleted while its request ran) is not counted.

        Raises:
            ValueError: a token count is negative or the served name is empty or too long.
        """
        if prompt_tokens < 0 or completion_tokens < 0:
            raise ValueError("token counts cannot be negative")
        if not 0 < len(served_name) <= _MAX_SERVED_NAME:
            raise ValueError(f"a served name has 1 to {_MAX_SERVED_NAME} characters")
        if key_id in self._by_id:
            self._ledger.count(key_id, served_name, prompt_tokens, completion_tokens)

    async def usage(self, key_id: str | None = None) -> builtins.list[KeyUsage]:
        """Return usage totals, counted and not yet flushed alike: of one key, or of every key.

        Raises:
            UnknownApiKeyError: ``key_id`` names no key.
            ApiKeyStoreError: the key file or the usage file cannot be read.
        """
        document = await self._document()
        ids = [record.id for record in document.keys] if key_id is None else [_find(document, key_id).id]
        return (await self._ledger.book()).entries(ids)

    async def flush_usage(self) -> None:
        """Add the usage counted in memory to the usage file (nothing is written when nothing changed).

        Raises:
            ApiKeyStoreError: the usage file cannot be read or written; the counts stay in memory
                for the next attempt and the file is left as it was.
        """
        if not self._ledger.has_changes:
            return
        document = await self._document()
        await self._ledger.flush([record.id for record in document.keys])

    async def run_usage_flusher(self) -> NoReturn:
        """Flush usage every ``flush_interval`` seconds until cancelled; start it in a task group.

        A failed flush is logged and retried at the next tick with the counts kept in memory.
        """
        while True:
            await anyio.sleep(self._flush_interval)
            try:
                await self.flush_usage()
            except ApiKeyStoreError as exc:
                logger.warning("API key usage kept in memory, not saved: %s", exc)

    async def aclose(self) -> None:
        """Flush the usage counted in memory one last time, even if the caller is being cancelled.

        Raises:
            ApiKeyStoreError: the usage file cannot be read or written.
        """
        with anyio.CancelScope(shield=True):
            await self.flush_usage()

    async def export_records(self) -> builtins.list[ApiKeyRecord]:
        """Return every key record (hashes, not secrets) for an encrypted backup.

        Raises:
            ApiKeyStoreError: the key file cannot be read.
        """
        return builtins.list((await self._document()).keys)

    async def import_records(self, records: Iterable[ApiKeyRecord], *, dry_run: bool = False) -> ApiKeyImport:
        """Merge restored records by id and hash: add only keys unknown here, never change a local one.

        Adding a key turns ``requireKeys`` on, as creating one does.

        Args:
            records: the backup's key records.
            dry_run: only report what would happen (the restore preview); nothing is written.

        Raises:
            ApiKeyStoreError: the key file cannot be read or written; nothing changed.
        """
        async with self._lock:
            document = await self._loaded()
            outcome, added = plan_import(document.keys, records)
            if added and not dry_run:
                await self._save(KeyFile(schema_version=1, require_keys=True, keys=(*document.keys, *added)))
        return outcome

    async def _document(self) -> KeyFile:
        # The request path reads the loaded document without the lock: changes replace it whole.
        if self._keys is not None:
            return self._keys
        async with self._lock:
            return await self._loaded()

    async def _loaded(self) -> KeyFile:
        # A failed load is not cached: once the file is fixed by hand the next call reads it.
        if self._keys is None:
            self._install(await anyio.to_thread.run_sync(self._read_keys))
        assert self._keys is not None
        return self._keys

    def _install(self, document: KeyFile) -> None:
        self._keys = document
        self._by_id = {record.id: record for record in document.keys}

    async def _save(self, document: KeyFile) -> None:
        # Shielded write: once it has started, memory must follow the file even if the caller is
        # cancelled meanwhile (the cancellation arrives right after).
        with anyio.CancelScope(shield=True):
            write = partial(write_store_file, self._path, encode_key_file(document), self._before_replace)
            await anyio.to_thread.run_sync(write)
            self._install(document)

    def _read_keys(self) -> KeyFile:
        raw = read_store_file(self._path)
        return EMPTY_KEY_FILE if raw is None else decode_key_file(self._path, raw)


def _find(document: KeyFile, key_id: str) -> ApiKeyRecord:
    for record in document.keys:
        if record.id == key_id:
            return record
    raise UnknownApiKeyError(key_id)


def _new_id(taken: dict[str, ApiKeyRecord]) -> str:
    while (key_id := secrets.token_hex(_ID_BYTES)) in taken:
        pass  # 48 random bits: a repeat is astronomically rare, but never reuse an id
    return key_id


def _utc_now() -> datetime:
    return datetime.now(UTC)
