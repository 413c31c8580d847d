"""The API-key lookup of ``/v1``: a request's bearer secret in, the stored key it belongs to out.

The path of a request's key, end to end: the router (``mirbad_router``) asks its ``KeyStore`` for the
bearer's grant; in the master that is the ``ApiKeyGate`` adapter, which calls
:meth:`ApiKeyStore.find_by_secret`, which reads the stored records and calls :func:`find_api_key`. The
lookup returns the key as stored (revoked or not, expired or not) and reads no clock: the gate drops
a revoked key, and the router alone decides expiry, with its own clock, and then has the key marked
used at that same instant (:meth:`ApiKeyStore.mark_used`).

The secret is hashed (:func:`secret_sha256`, the only form in which a secret is stored) and compared
with every stored hash in constant time, so the answer's timing reveals nothing about stored keys.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence

from mirbad_protocol.admin import ApiKeyRecord

from ._api_key_file import secret_sha256

__all__ = ["find_api_key"]


def find_api_key(records: Sequence[ApiKeyRecord], secret: str) -> ApiKeyRecord | None:
    """Return the record whose secret is ``secret``, whatever its state, or None when no key has it.

    Args:
        records: the stored keys.
        secret: the bearer secret a request carries.
    """
    return find_by_digest(records, secret_sha256(secret))


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
