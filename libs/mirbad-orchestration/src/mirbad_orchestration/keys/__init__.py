"""API keys for ``/v1``: the key store, its usage ledger, and the check every request goes through.

:func:`verify_api_key` (``keys/_verification.py``) is the router's API-key check: it turns a request's
bearer secret into its stored key or a refusal; that module tells the whole path. :class:`ApiKeyStore`
keeps the keys (only SHA-256 digests of their secrets) in ``api-keys.json`` and counts their use in a
separate usage file.
"""

from ._api_key_file import API_KEYS_FILE, ApiKeyImport, secret_sha256
from ._api_key_usage import API_KEY_USAGE_FILE, DEFAULT_MAX_MODELS_PER_KEY, OTHER_MODELS
from ._api_keys import DEFAULT_USAGE_FLUSH_SECONDS, ApiKeyStore
from ._verification import verify_api_key

__all__ = [
    "API_KEYS_FILE",
    "API_KEY_USAGE_FILE",
    "DEFAULT_MAX_MODELS_PER_KEY",
    "DEFAULT_USAGE_FLUSH_SECONDS",
    "OTHER_MODELS",
    "ApiKeyImport",
    "ApiKeyStore",
    "secret_sha256",
    "verify_api_key",
]
