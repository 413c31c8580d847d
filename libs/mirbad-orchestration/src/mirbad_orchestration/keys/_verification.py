"""The API-key check of ``/v1``: a request's bearer secret in, the key it belongs to (or a refusal) out.

This is the one function behind the router's key check. The path of a request's key, end to end: the
router (``mirbad_router``) asks its ``KeyStore`` to authenticate the bearer; in the master that is the
``ApiKeyGate`` adapter, which calls :meth:`ApiKeyStore.authenticate`, which reads the stored records
and calls :func:`verify_api_key`. The store then marks the key used; the adapter turns the record into
the router's grant (allowed models, expiry, rate limits).

The secret is hashed (:func:`secret_sha256`, the only form in which a secret is stored) and compared
with every stored hash in constant time, so the answer's timing reveals nothing about stored keys.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from datetime import datetime

from mirbad_orchestration.exceptions import ApiKeyExpiredError, ApiKeyRevokedError
from mirbad_protocol import ApiKeyRecord

from ._api_key_file import secret_sha256

__all__ = ["verify_api_key"]


def verify_api_key(records: Sequence[ApiKeyRecord], secret: str, now: datetime) -> ApiKeyRecord | None:
    """Return the record whose secret is ``secret``, or None when no stored key has it.

    Args:
        records: the stored keys.
        secret: the bearer secret a request carries.
        now: the current time, aware; a key whose expiry is at or before it is refused.

    Raises:
        ApiKeyRevokedError: the key was revoked (checked before expiry).
        ApiKeyExpiredError: the key's expiry has passed.
    """
    record = find_by_digest(records, secret_sha256(secret))
    if record is None:
        return None
    if record.revoked_at is not None:
        raise ApiKeyRevokedError(record.id, record.name, record.revoked_at)
    if record.expires_at is not None and now >= record.expires_at:
        raise ApiKeyExpiredError(record.id, record.name, record.expires_at)
    return record


def find_by_digest(records: Sequence[ApiKeyRecord], digest: str) -> ApiKeyRecord | None:
    """Return the record whose hash is ``digest``, comparing with every record in constant time.

    No early exit: the time taken depends on the number of keys only, never on which key matched or
    on how much of a stored hash a guess shares.
    """
    found: ApiKeyRecord | None = None
    for record in records:
        if hmac.compare_digest(record.secret_sha256, digest):
            found = record
    return found
