"""One-time download tokens: a browser fetches a backup by a link that needs no bearer header.

A token names one backup file, works once and for two minutes; it is random (32 bytes, URL-safe) and
kept only in memory, so a restart forgets every token. Taking a token removes it whether or not the
file is still there.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

__all__ = ["DOWNLOAD_TOKEN_TTL", "BackupDownloadTokens", "DownloadToken"]

DOWNLOAD_TOKEN_TTL: Final = timedelta(minutes=2)
"""How long a download token works."""

_MAX_TOKENS: Final = 256  # an administrator asking for tokens in a loop cannot grow the table forever


@dataclass(frozen=True)
class DownloadToken:
    """A token issued for one backup.

    Attributes:
        token: the secret in the link.
        name: the backup's file name.
        issued_to: who asked for it (the download's audit line names them).
        expires_at: when it stops working.
    """

    token: str
    name: str
    issued_to: str
    expires_at: datetime


def _utc_now() -> datetime:
    return datetime.now(UTC)


class BackupDownloadTokens:
    """The tokens issued and not yet used (in memory).

    Args:
        ttl: how long a token works.
        clock: the current time, timezone-aware.
    """

    def __init__(
        self, *, ttl: timedelta = DOWNLOAD_TOKEN_TTL, clock: Callable[[], datetime] = _utc_now
    ) -> None:
        self._ttl = ttl
        self._clock = clock
        self._tokens: dict[str, DownloadToken] = {}

    def issue(self, name: str, issued_to: str) -> DownloadToken:
        """A new token for the backup ``name`` (the caller checked the name), asked for by ``issued_to``."""
        now = self._clock()
        self._drop_expired(now)
        while len(self._tokens) >= _MAX_TOKENS:
            oldest = min(self._tokens.values(), key=lambda issued: issued.expires_at)
            del self._tokens[oldest.token]
        issued = DownloadToken(secrets.token_urlsafe(32), name, issued_to, now + self._ttl)
        self._tokens[issued.token] = issued
        return issued

    def take(self, token: str) -> DownloadToken | None:
        """What ``token`` was issued for, once; None when it is unknown, used or expired."""
        issued = self._tokens.pop(token, None)
        if issued is None or self._clock() >= issued.expires_at:
            return None
        return issued

    def _drop_expired(self, now: datetime) -> None:
        for token in [t for t, issued in self._tokens.items() if now >= issued.expires_at]:
            del self._tokens[token]
