"""The usage half of the key store: counts kept in memory, added to ``api-key-usage.json`` in batches.

Counting is a dict update with no lock and no I/O, so the router can count at the end of every
response. A flush swaps the pending counts out, adds them to the file's totals and writes the result;
counts arriving while it writes go to the next batch, and a failed write puts its batch back, so no
count is lost or counted twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import partial
from pathlib import Path

import anyio
import anyio.to_thread

from mirbad_orchestration.exceptions import ApiKeyStoreError
from mirbad_protocol.support import BeforeReplace

from ._api_key_file import read_store_file, write_store_file
from ._api_key_usage import UsageBook

__all__: list[str] = []


class UsageLedger:
    """Usage totals of the keys: what the file holds plus what was counted since the last flush.

    Args:
        path: the usage file.
        max_models: served names kept apart per key.
        before_replace: test seam passed to the atomic write.
    """

    def __init__(self, path: Path, *, max_models: int, before_replace: BeforeReplace | None = None) -> None:
        self._path = path
        self._max_models = max_models
        self._before_replace = before_replace
        self._lock = anyio.Lock()
        self._saved: UsageBook | None = None
        self._pending = UsageBook(max_models)
        self._dirty = False  # something to write besides pending counts (a deleted key to prune)

    @property
    def has_changes(self) -> bool:
        """Whether a flush would write anything."""
        return bool(self._pending) or self._dirty

    def count(self, key_id: str, served_name: str, prompt_tokens: int, completion_tokens: int) -> None:
        """Count one request (in memory)."""
        self._pending.count(key_id, served_name, prompt_tokens, completion_tokens)

    def touch(self, key_id: str, when: datetime) -> None:
        """Remember a use of ``key_id`` at ``when`` (in memory)."""
        self._pending.touch(key_id, when)

    def forget(self, key_id: str) -> None:
        """Drop a deleted key's pending counts; its saved ones are pruned by the next flush."""
        self._pending.drop(key_id)
        self._dirty = True

    def known_last_use(self, key_id: str) -> datetime | None:
        """Return the last use of ``key_id`` known without reading the file."""
        book = self._saved.merged(self._pending) if self._saved is not None else self._pending
        return book.last_used_at(key_id)

    async def book(self) -> UsageBook:
        """Return a copy of every total: the file's plus the pending counts.

        Raises:
            ApiKeyStoreError: the usage file cannot be read.
        """
        async with self._lock:
            return (await self._saved_book()).merged(self._pending)

    async def flush(self, key_ids: Sequence[str]) -> None:
        """Add the pending counts to the file, keeping only ``key_ids`` (the keys that still exist).

        Raises:
            ApiKeyStoreError: the file cannot be read or written; the counts stay pending.
        """
        async with self._lock:
            saved = await self._saved_book()
            batch, self._pending = self._pending, UsageBook(self._max_models)
            self._dirty = False
            merged = saved.merged(batch)
            merged.keep_only(key_ids)
            try:
                # Shielded: once the batch is taken, only a finished write or a failure may end this.
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(
                        partial(
                            write_store_file, self._path, merged.to_document(key_ids), self._before_replace
                        )
                    )
            except ApiKeyStoreError:
                batch.merge(self._pending)
                self._pending, self._dirty = batch, True
                raise
            self._saved = merged

    async def _saved_book(self) -> UsageBook:
        # A failed read is not cached: once the file is fixed by hand the next call reads it.
        if self._saved is None:
            self._saved = await anyio.to_thread.run_sync(self._read)
        return self._saved

    def _read(self) -> UsageBook:
        raw = read_store_file(self._path)
        if raw is None:
            return UsageBook(self._max_models)
        return UsageBook.from_file(self._path, raw, self._max_models)
