"""The administrator's sign-in: one password, stored as an scrypt hash, and session cookies for the portal.

The password is generated on the first run and shown once (the banner of ``mirbad up``); only its
scrypt hash is kept, in ``{data_dir}/admin.json`` (owner-only). ``mirbad admin reset-password`` makes a
new one. Every check compares in constant time and every wrong password costs one full scrypt
derivation (only the password already verified is recognised cheaply, by its SHA-256). Guessing is
throttled per address with a growing, decaying lock and paced during a spray from many addresses
(:mod:`._sign_in_throttle`): a locked client is refused (429) without its password being looked at, and
an address's passwords are checked one at a time.

``/api`` accepts ``Authorization: Bearer <password>`` (scripts and notebooks) or the session cookie the
portal's sign-in sets (:data:`SESSION_COOKIE`, HttpOnly). Sessions live in memory: a restarted master
signs everyone out, and a password reset ends every session.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

import anyio.to_thread

from mirbad_protocol.support import write_json_atomic

from ._sign_in_throttle import SignInThrottle
from .exceptions import NotSignedInError, TooManyAttemptsError, WrongPasswordError

__all__ = [
    "ADMIN_FILE_NAME",
    "ADMIN_USER",
    "SESSION_COOKIE",
    "SESSION_LIFETIME_S",
    "AdminAuth",
]

ADMIN_FILE_NAME: Final = "admin.json"
"""The password hash's file inside the data directory."""
ADMIN_USER: Final = "admin"
"""The one administrator's name, as the audit log records it (``user:admin``)."""
SESSION_COOKIE: Final = "mirbad_session"
"""The portal's session cookie (HttpOnly, SameSite=Strict)."""
SESSION_LIFETIME_S: Final = 12 * 3600.0
"""How long a session lasts without being used."""

# scrypt at N=2^14, r=8: 16 MiB and some tens of milliseconds per check, which is why a verified
# password is remembered (as its SHA-256) for the cheap checks of later requests. Only a match is
# cheap: anything else still takes the full derivation, so no wrong guess is ever cheaper than another.
_SCRYPT_N: Final = 2**14
_SCRYPT_R: Final = 8
_SCRYPT_P: Final = 1
_KEY_BYTES: Final = 32
_PASSWORD_BYTES: Final = 18  # 24 URL-safe characters


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
        self._throttle = SignInThrottle(clock=clock, known_for_s=SESSION_LIFETIME_S)
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

    def reset_password(self, password: str | None = None) -> str:
        """Replace the password and return it (shown once, never stored).

        Args:
            password: the new password (a Kubernetes Secret's, say); a new random one when None.
        """
        password = secrets.token_urlsafe(_PASSWORD_BYTES) if password is None else password
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

    async def sign_in(self, password: str, client: str, *, signed_in: bool = False) -> str:
        """Check ``password`` for ``client`` (an address) and open a session; returns its token.

        Args:
            password: the password given.
            client: the address the attempt is counted under.
            signed_in: the request carries a live session (never locked out; see :mod:`._sign_in_throttle`).

        Raises:
            TooManyAttemptsError: the client has used up its attempts for now.
            WrongPasswordError: the password is wrong (the attempt is counted).
        """
        salt = await self.check_password(password, client, signed_in=signed_in)
        token = secrets.token_urlsafe(32)
        self._sessions[token] = _Session(self._clock() + SESSION_LIFETIME_S, salt)
        return token

    async def check_password(self, password: str, client: str, *, signed_in: bool = False) -> bytes:
        """Check ``password`` for ``client``, counting a wrong one; returns the current hash's salt.

        Args:
            password: the password given.
            client: the address the attempt is counted under.
            signed_in: the request carries a live session (never locked out; see :mod:`._sign_in_throttle`).

        Raises:
            TooManyAttemptsError: the client or the account has used up its attempts for now.
            WrongPasswordError: the password is wrong.
        """
        try:
            async with self._throttle.checking(client):
                # Judged once the slot is ours: the checks before this one have left their strikes.
                wait = self._throttle.locked_for(client, signed_in=signed_in)
                if wait > 0:
                    raise TooManyAttemptsError(max(1, math.ceil(wait)))
                salt = await anyio.to_thread.run_sync(self._verify, password)
                if salt is None:
                    self._throttle.strike(client)
                    raise WrongPasswordError("the administrator password is wrong")
                self._throttle.forgive(client)
                return salt
        except TimeoutError:
            # The address's earlier checks are still running: a flood of them from one address.
            raise TooManyAttemptsError(1) from None

    async def has_session(self, token: str | None) -> bool:
        """Whether ``token`` is a live session (as :meth:`check_session` judges it, without raising)."""
        if not token:
            return False
        try:
            await self.check_session(token)
        except NotSignedInError:
            return False
        return True

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

    def _verify(self, password: str) -> bytes | None:
        stored = self._load()
        digest = hashlib.sha256(password.encode("utf-8", "surrogatepass")).digest()
        remembered = self._verified
        same_salt = remembered is not None and hmac.compare_digest(remembered[0], stored.salt)
        if same_salt and remembered is not None and hmac.compare_digest(remembered[1], digest):
            return stored.salt
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
            unusable = f"the administrator password file {self._path} is unusable: {exc}"
            raise NotSignedInError(unusable) from None


def _derive(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    secret = password.encode("utf-8", "surrogatepass")
    return hashlib.scrypt(secret, salt=salt, n=n, r=r, p=p, maxmem=64 * 1024 * 1024, dklen=_KEY_BYTES)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
