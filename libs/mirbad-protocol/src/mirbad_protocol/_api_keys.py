"""API keys on the wire: the admin API's create body, the key as listed, and per-key usage.

A key's secret (``mb-`` and 43 URL-safe characters) is shown once, in :class:`ApiKeyCreated`; every
other model carries only its :attr:`~ApiKeyInfo.prefix`. :class:`ApiKeyRecord` is what the master stores
and what an encrypted backup exports: the key's settings and the SHA-256 of its secret, never the
secret itself.
"""

from __future__ import annotations

import unicodedata
from datetime import UTC, datetime
from typing import Annotated, Final, Literal

from pydantic import AfterValidator, AwareDatetime, Field

from ._user_input import UserCheck, UserMaximum, printable_name
from ._wire import WireModel
from .exceptions import InvalidFieldError

__all__ = [
    "API_KEY_ID_PATTERN",
    "API_KEY_NAME_MAX_LENGTH",
    "API_KEY_SECRET_PREFIX",
    "MAX_ALLOWED_MODELS",
    "MAX_KEY_RATE_LIMIT",
    "ApiKeyCreate",
    "ApiKeyCreated",
    "ApiKeyInfo",
    "ApiKeyRecord",
    "ApiKeyState",
    "KeyUsage",
]

API_KEY_SECRET_PREFIX: Final = "mb-"  # noqa: S105 - a public marker, not a password
"""How every secret starts, so a leaked one is recognisable by secret scanners and people alike."""
API_KEY_NAME_MAX_LENGTH: Final = 64
"""The longest key name, counted after surrounding white space is removed."""
API_KEY_ID_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
"""A key id: it appears in admin URLs (``/api/keys/{id}``), so it is URL-safe."""
MAX_ALLOWED_MODELS: Final = 256
"""The longest model allow-list of one key."""

ApiKeyState = Literal["active", "expired", "revoked"]
"""Whether a key authenticates now; a revoked key reads ``revoked`` even after its expiry."""


def _clean_name(value: str) -> str:
    name = value.strip()
    if not 1 <= len(name) <= API_KEY_NAME_MAX_LENGTH:
        raise ValueError(f"must be 1 to {API_KEY_NAME_MAX_LENGTH} characters (not counting outer spaces)")
    # Names end up in tables, logs and audit lines: a control or line-break character would forge rows.
    if any(unicodedata.category(ch) in {"Cc", "Zl", "Zp"} for ch in name):
        raise ValueError("must not contain control or line-break characters")
    return name


def _unique_models(value: tuple[str, ...]) -> tuple[str, ...]:
    # Served names resolve case-insensitively, so "Qwen" and "qwen" would be one entry twice.
    seen: set[str] = set()
    kept: list[str] = []
    for name in value:
        if name.casefold() not in seen:
            seen.add(name.casefold())
            kept.append(name)
    return tuple(kept)


def _utc(value: datetime) -> datetime:
    try:
        return value.astimezone(UTC)
    except OverflowError:
        # 0001-01-01T00:00+01:00 is a valid timestamp whose UTC time is before year 1.
        raise ValueError("is outside the years 1 to 9999 once converted to UTC") from None


KeyName = Annotated[str, AfterValidator(_clean_name)]
ServedName = Annotated[
    str, Field(min_length=1, max_length=200, pattern=r"^[^\s]+$"), UserCheck(printable_name)
]
AllowedModels = Annotated[
    tuple[ServedName, ...], Field(max_length=MAX_ALLOWED_MODELS), AfterValidator(_unique_models)
]
# strict: a limit is a JSON integer, never true, 1.5 or "60".
Limit = Annotated[int, Field(gt=0, strict=True)]
MAX_KEY_RATE_LIMIT: Final = 10**12
"""The largest per-minute limit a person may set (far past any real rate; JavaScript reads it exactly)."""
_UserLimit = Annotated[Limit, UserMaximum(MAX_KEY_RATE_LIMIT)]
UtcTime = Annotated[AwareDatetime, AfterValidator(_utc)]
KeyId = Annotated[str, Field(pattern=API_KEY_ID_PATTERN)]
Count = Annotated[int, Field(ge=0, strict=True)]


class ApiKeyCreate(WireModel):
    """The body of a request to create a key (``POST /api/keys``).

    Attributes:
        name: what the key is for, 1 to 64 characters once outer spaces are removed.
        allowed_models: the served names the key may call; empty allows every model. Duplicates
            (compared case-insensitively) are dropped.
        expires_at: when the key stops authenticating (time-zone aware); None never expires.
            Whether it is in the future is checked against the master's clock by
            :meth:`check_expiry`, which the key store calls.
        requests_per_minute: the most requests the key may start per minute; None is unlimited.
        tokens_per_minute: the most prompt + completion tokens per minute; None is unlimited.
    """

    name: KeyName
    allowed_models: AllowedModels = ()
    expires_at: UtcTime | None = None
    requests_per_minute: _UserLimit | None = None
    tokens_per_minute: _UserLimit | None = None

    def check_expiry(self, now: datetime) -> None:
        """Refuse an expiry that is not after ``now``.

        Raises:
            InvalidFieldError: field ``expiresAt``, when the key would be born expired.
        """
        if self.expires_at is not None and self.expires_at <= now:
            raise InvalidFieldError("expiresAt", f"must be in the future (now is {now.isoformat()})")


class ApiKeyInfo(WireModel):
    """A key as the admin API lists it: its settings and state, never its secret.

    Attributes:
        id: the key's short random id.
        name: what the key is for.
        prefix: the first characters of the secret, to tell keys apart in a list.
        allowed_models: the served names the key may call; empty allows every model.
        expires_at: when the key stops authenticating; None never.
        requests_per_minute: the request rate limit; None is unlimited.
        tokens_per_minute: the token rate limit; None is unlimited.
        created_at: when the key was created.
        revoked_at: when it was revoked; None while it is not.
        last_used_at: when it last authenticated a request; None if never.
    """

    id: KeyId
    name: KeyName
    prefix: str
    allowed_models: AllowedModels = ()
    expires_at: UtcTime | None = None
    requests_per_minute: Limit | None = None
    tokens_per_minute: Limit | None = None
    created_at: UtcTime
    revoked_at: UtcTime | None = None
    last_used_at: UtcTime | None = None

    def allows_model(self, served_name: str) -> bool:
        """Say whether the key may call ``served_name`` (compared case-insensitively, as routing does)."""
        wanted = served_name.casefold()
        return not self.allowed_models or any(name.casefold() == wanted for name in self.allowed_models)

    def state(self, now: datetime) -> ApiKeyState:
        """Return whether the key authenticates at ``now``: active, expired or revoked."""
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and now >= self.expires_at:
            return "expired"
        return "active"


class ApiKeyCreated(ApiKeyInfo):
    """A newly created key with its secret: the only time the secret is ever shown.

    Attributes:
        secret: the bearer token (``mb-…``); only its SHA-256 is stored, so it cannot be shown again.
    """

    secret: str = Field(repr=False)


class ApiKeyRecord(WireModel):
    """A key as the master stores it and an encrypted backup carries it.

    A restore merges records by id and by hash: the hash is the key's identity across installs, so it
    is a plain SHA-256 of the secret (no per-install pepper), and the key keeps working after a restore
    on a new machine.

    Attributes:
        id: the key's short random id.
        name: what the key is for.
        prefix: the first characters of the secret.
        secret_sha256: the lowercase hex SHA-256 of the secret's UTF-8 bytes.
        allowed_models: the served names the key may call; empty allows every model.
        expires_at: when the key stops authenticating; None never.
        requests_per_minute: the request rate limit; None is unlimited.
        tokens_per_minute: the token rate limit; None is unlimited.
        created_at: when the key was created.
        revoked_at: when it was revoked; None while it is not.
    """

    id: KeyId
    name: KeyName
    prefix: Annotated[str, Field(min_length=1, max_length=32, pattern=r"^[\x21-\x7e]+$")]
    secret_sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    allowed_models: AllowedModels = ()
    expires_at: UtcTime | None = None
    requests_per_minute: Limit | None = None
    tokens_per_minute: Limit | None = None
    created_at: UtcTime
    revoked_at: UtcTime | None = None

    def info(self, last_used_at: datetime | None = None) -> ApiKeyInfo:
        """Return the listed form of this record (everything but the hash)."""
        fields = self.model_dump(exclude={"secret_sha256"})
        return ApiKeyInfo(**fields, last_used_at=last_used_at)


class KeyUsage(WireModel):
    """What one key consumed on one served name, read from the responses' usage objects.

    Attributes:
        key_id: the key.
        served_name: the model as the client named it (resolved to its served name).
        prompt_tokens: prompt tokens counted so far.
        completion_tokens: completion tokens counted so far.
        requests: requests counted so far (with or without a usage object).
    """

    key_id: KeyId
    served_name: Annotated[str, Field(min_length=1, max_length=200)]
    prompt_tokens: Count
    completion_tokens: Count
    requests: Count

    @property
    def total_tokens(self) -> int:
        """Prompt and completion tokens together."""
        return self.prompt_tokens + self.completion_tokens
