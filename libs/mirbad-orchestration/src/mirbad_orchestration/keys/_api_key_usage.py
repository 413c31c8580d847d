"""Per-key usage totals and their file, ``{data_dir}/api-key-usage.json``.

The router counts every finished request in memory (a dict update on the request path, no I/O); the
key store adds those counts to the file's totals on a cadence. The document is::

    {"schemaVersion": 1,
     "lastUsedAt": {"<key id>": "<time>"},
     "usage": [{"keyId", "servedName", "promptTokens", "completionTokens", "requests"}]}

Growth is bounded: each key keeps at most ``max_models`` served names, and what a key spends on
further names is counted under :data:`OTHER_MODELS`. Usage of deleted keys is dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final, Literal

from pydantic import AwareDatetime, ValidationError

from mirbad_orchestration.exceptions import ApiKeyStoreError
from mirbad_protocol import WireModel, field_error_from_validation
from mirbad_protocol.admin import KeyUsage

__all__ = ["API_KEY_USAGE_FILE", "DEFAULT_MAX_MODELS_PER_KEY", "OTHER_MODELS"]

API_KEY_USAGE_FILE: Final = "api-key-usage.json"
"""The usage file's name in the master's data directory."""
OTHER_MODELS: Final = "(other models)"
"""The served name under which a key's usage beyond its first served names is counted.

It holds spaces, which no served name may, so it never mixes with a real model's usage.
"""
DEFAULT_MAX_MODELS_PER_KEY: Final = 256
"""How many served names one key's usage is kept apart for."""


@dataclass
class _Tally:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    requests: int = 0

    def add(self, other: _Tally) -> None:
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.requests += other.requests


class _UsageFile(WireModel):
    schema_version: Literal[1]
    last_used_at: dict[str, AwareDatetime]
    usage: tuple[KeyUsage, ...]


class UsageBook:
    """Usage totals and last-use times per key, mutable, with a bounded number of served names per key."""

    def __init__(self, max_models: int = DEFAULT_MAX_MODELS_PER_KEY) -> None:
        self._max_models = max_models
        self._tallies: dict[str, dict[str, _Tally]] = {}
        self._last_used: dict[str, datetime] = {}

    def __bool__(self) -> bool:
        return bool(self._tallies or self._last_used)

    def add(self, key_id: str, served_name: str, tally: _Tally) -> None:
        """Add ``tally`` to the key's count for ``served_name`` (or for :data:`OTHER_MODELS`)."""
        models = self._tallies.setdefault(key_id, {})
        kept_apart = len(models) - (OTHER_MODELS in models)  # the overflow bucket takes no slot
        if served_name not in models and kept_apart >= self._max_models:
            served_name = OTHER_MODELS
        models.setdefault(served_name, _Tally()).add(tally)

    def count(self, key_id: str, served_name: str, prompt_tokens: int, completion_tokens: int) -> None:
        """Count one request of ``key_id`` on ``served_name``."""
        self.add(key_id, served_name, _Tally(prompt_tokens, completion_tokens, 1))

    def touch(self, key_id: str, when: datetime) -> None:
        """Remember that ``key_id`` was used at ``when`` (an earlier time never replaces a later one)."""
        previous = self._last_used.get(key_id)
        if previous is None or when > previous:
            self._last_used[key_id] = when

    def last_used_at(self, key_id: str) -> datetime | None:
        """Return when ``key_id`` was last used, if known."""
        return self._last_used.get(key_id)

    def merge(self, other: UsageBook) -> None:
        """Add every count and last-use time of ``other`` to this book."""
        for key_id, models in other._tallies.items():
            for served_name, tally in models.items():
                self.add(key_id, served_name, tally)
        for key_id, when in other._last_used.items():
            self.touch(key_id, when)

    def merged(self, other: UsageBook) -> UsageBook:
        """Return a new book holding this one's totals plus ``other``'s."""
        combined = UsageBook(self._max_models)
        combined.merge(self)
        combined.merge(other)
        return combined

    def drop(self, key_id: str) -> None:
        """Forget everything about ``key_id``."""
        self._tallies.pop(key_id, None)
        self._last_used.pop(key_id, None)

    def keep_only(self, key_ids: Iterable[str]) -> None:
        """Forget every key not in ``key_ids`` (keys deleted since they were counted)."""
        kept = set(key_ids)
        for key_id in [*self._tallies, *self._last_used]:
            if key_id not in kept:
                self.drop(key_id)

    def entries(self, key_ids: Sequence[str]) -> list[KeyUsage]:
        """Return the totals of ``key_ids``, in that order, served names alphabetically, overflow last."""
        return [
            KeyUsage(
                key_id=key_id,
                served_name=served_name,
                prompt_tokens=tally.prompt_tokens,
                completion_tokens=tally.completion_tokens,
                requests=tally.requests,
            )
            for key_id in key_ids
            for served_name, tally in sorted(
                self._tallies.get(key_id, {}).items(),
                key=lambda item: (item[0] == OTHER_MODELS, item[0].casefold(), item[0]),
            )
        ]

    def to_document(self, key_ids: Sequence[str]) -> dict[str, object]:
        """Return the usage file's JSON document for ``key_ids``."""
        last_used = {key_id: self._last_used[key_id] for key_id in key_ids if key_id in self._last_used}
        document = _UsageFile(schema_version=1, last_used_at=last_used, usage=tuple(self.entries(key_ids)))
        return document.model_dump(mode="json", by_alias=True)

    @classmethod
    def from_file(cls, path: Path, raw: bytes, max_models: int) -> UsageBook:
        """Read a usage file's bytes.

        Raises:
            ApiKeyStoreError: the bytes are not a usage document; the message names ``path`` and the
                first bad field.
        """
        try:
            document = _UsageFile.model_validate_json(raw)
        except ValidationError as exc:
            raise ApiKeyStoreError(path, f"not a usage file: {field_error_from_validation(exc)}") from None
        book = cls(max_models)
        for entry in document.usage:
            tally = _Tally(entry.prompt_tokens, entry.completion_tokens, entry.requests)
            book.add(entry.key_id, entry.served_name, tally)
        for key_id, when in document.last_used_at.items():
            book.touch(key_id, when)
        return book
