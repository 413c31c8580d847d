"""The administrator's sign-in: one password, stored as an scrypt hash, and session cookies for the portal.

The password is generated on the first run and shown once (the banner of ``mirbad up``); only its
scrypt hash is kept, in ``{data_dir}/admin.json`` (owner-only). ``mirbad admin reset-password`` makes a
new one. Every check compares in constant time, and a client that gets it wrong five times within a
minute is refused (429) for the rest of that minute, the right password included, so guessing never
goes faster than five tries a minute.

``/api`` accepts ``Authorization: Bearer <password>`` (scripts and notebooks) or the session cookie the
portal's sign-in sets (:data:`SESSION_COOKIE`, HttpOnly). Sessions live in memory: a restarted master
signs everyone out, and a password reset ends every session.
"""

from __future__ import annotations

import base64
import collections
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

import anyio.to_thread

from mirbad_protocol import MirbadError, write_json_atomic

__all__ = [
    "ADMIN_FILE_NAME",
    "ADMIN_USER",
    "ATTEMPT_WINDOW_S",
    "MAX_FAILED_ATTEMPTS",
    "SESSION_COOKIE",
    "SESSION_LIFETIME_S",
    "AdminAuth",
    "AdminAuthError",
    "TooManyAttemptsError",
    "WrongPasswordError",
]

ADMIN_FILE_NAME: Final = "admin.json"
"""The password hash's file inside the data directory."""
ADMIN_USER: Final = "admin"
"""The one administrator's name, as the audit log records it (``user:admin``)."""
SESSION_COOKIE: Final = "mirbad_session"
"""The portal's session cookie (HttpOnly, SameSite=Strict)."""
SESSION_LIFETIME_S: Final = 12 * 3600.0
"""How long a session lasts without being used."""
MAX_FAILED_ATTEMPTS: Final = 5
"""Wrong passwords one client may send per :data:`ATTEMPT_WINDOW_S`."""
ATTEMPT_WINDOW_S: Final = 60.0
"""The window the failed attempts are counted in."""

# scrypt at N=2^14, r=8: 16 MiB and some tens of milliseconds per check, which is why a verified
# password is remembered (as its SHA-256) for the cheap checks of later requests.
_SCRYPT_N: Final = 2**14
_SCRYPT_R: Final = 8
_SCRYPT_P: Final = 1
_KEY_BYTES: Final = 32
_PASSWORD_BYTES: Final = 18  # 24 URL-safe characters


class AdminAuthError(MirbadError):
    """The request is not signed in as the administrator (HTTP 401)."""


class WrongPasswordError(AdminAuthError):
    """No password, a wrong one, or an unknown session."""


class TooManyAttemptsError(AdminAuthError):
    """Too many wrong passwords from this client lately (HTTP 429).

    Attributes:
        retry_after_s: seconds until the client may try again.
    """

    def __init__(self, retry_after_s: int) -> None:
        super().__init__(f"too many wrong passwords; try again in {retry_after_s} s")
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class _Hash:
    salt: bytes
    key: bytes
    n: int
    r: int
    p: int

    def matches(self, password: str) -> bool:
        derived = _derive(password, self.salt, self.n, self.r, self.p)
        return hmac.compare_digest(derived, self.key)


@dataclass
class _Session:
    expires: float
    salt: bytes  # the password it was opened under: a reset ends it


class AdminAuth:
    """Checks the administrator's password and keeps the portal's sessions.

    Args:
        data_dir: the data directory holding :data:`ADMIN_FILE_NAME`.
        clock: monotonic seconds (tests pass a fake).
    """

    def __init__(self, data_dir: Path, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._path = data_dir / ADMIN_FILE_NAME
        self._clock = clock
        self._failures: dict[str, collections.deque[float]] = {}
        self._sessions: dict[str, _Session] = {}
        self._verified: tuple[bytes, bytes] | None = None  # (salt, SHA-256 of the verified password)

    @property
    def path(self) -> Path:
        """The password file."""
        return self._path

    def ensure_password(self) -> str | None:
        """Create the password on the first run and return it; ``None`` when one exists already."""
        if self._path.exists():
            return None
        return self.reset_password()

    def reset_password(self) -> str:
        """Replace the password with a new random one and return it (shown once, never stored)."""
        password = secrets.token_urlsafe(_PASSWORD_BYTES)
        salt = secrets.token_bytes(16)
        key = _derive(password, salt, _SCRYPT_N, _SCRYPT_R, _SCRYPT_P)
        document = {
            "version": 1,
            "scrypt": {"n": _SCRYPT_N, "r": _SCRYPT_R, "p": _SCRYPT_P, "salt": _b64(salt), "key": _b64(key)},
            "createdAt": datetime.now(UTC).isoformat(),
        }
        self._path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_json_atomic(self._path, document, mode=0o600)
        self._verified = None
        self._sessions.clear()
        return password

    async def sign_in(self, password: str, client: str) -> str:
        """Check ``password`` for ``client`` (an address) and open a session; returns its token.

        Raises:
            TooManyAttemptsError: the client has used up its attempts for now.
            WrongPasswordError: the password is wrong (the attempt is counted).
        """
        salt = await self.check_password(password, client)
        token = secrets.token_urlsafe(32)
        self._sessions[token] = _Session(self._clock() + SESSION_LIFETIME_S, salt)
        return token

    async def check_password(self, password: str, client: str) -> bytes:
        """Check ``password`` for ``client``, counting a wrong one; returns the current hash's salt.

        Raises:
            TooManyAttemptsError: the client has used up its attempts for now.
            WrongPasswordError: the password is wrong.
        """
        self._refuse_if_locked(client)
        salt = await anyio.to_thread.run_sync(self._verify, password)
        if salt is None:
            self._failures.setdefault(client, collections.deque()).append(self._clock())
            raise WrongPasswordError("the administrator password is wrong")
        return salt

    async def check_session(self, token: str) -> None:
        """Accept a live session (its lifetime starts over).

        Raises:
            WrongPasswordError: no such session, or it expired or outlived a password reset.
        """
        session = self._sessions.get(token)
        now = self._clock()
        if session is None or session.expires <= now:
            self._sessions.pop(token, None)
            raise WrongPasswordError("the session has ended; sign in again")
        current = await anyio.to_thread.run_sync(self._load)
        if not hmac.compare_digest(current.salt, session.salt):
            self._sessions.pop(token, None)
            raise WrongPasswordError("the password was reset; sign in again")
        session.expires = now + SESSION_LIFETIME_S

    def sign_out(self, token: str) -> None:
        """End a session (an unknown token is ignored)."""
        self._sessions.pop(token, None)

    def _refuse_if_locked(self, client: str) -> None:
        failures = self._failures.get(client)
        if failures is None:
            return
        now = self._clock()
        while failures and now - failures[0] >= ATTEMPT_WINDOW_S:
            failures.popleft()
        if not failures:
            del self._failures[client]
        elif len(failures) >= MAX_FAILED_ATTEMPTS:
            raise TooManyAttemptsError(max(1, round(ATTEMPT_WINDOW_S - (now - failures[0]))))

    def _verify(self, password: str) -> bytes | None:
        stored = self._load()
        digest = hashlib.sha256(password.encode("utf-8", "surrogatepass")).digest()
        remembered = self._verified
        if remembered is not None and hmac.compare_digest(remembered[0], stored.salt):
            return stored.salt if hmac.compare_digest(remembered[1], digest) else None
        if not stored.matches(password):
            return None
        self._verified = (stored.salt, digest)
        return stored.salt

    def _load(self) -> _Hash:
        try:
            document = json.loads(self._path.read_bytes())
            params = document["scrypt"]
            return _Hash(
                salt=base64.b64decode(params["salt"]),
                key=base64.b64decode(params["key"]),
                n=int(params["n"]),
                r=int(params["r"]),
                p=int(params["p"]),
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            # Fail closed: without a readable hash nobody signs in (mirbad admin reset-password fixes it).
            raise AdminAuthError(f"the administrator password file {self._path} is unusable: {exc}") from None


def _derive(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    secret = password.encode("utf-8", "surrogatepass")
    return hashlib.scrypt(secret, salt=salt, n=n, r=r, p=p, maxmem=64 * 1024 * 1024, dklen=_KEY_BYTES)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
