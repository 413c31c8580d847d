"""DPAPI through pywin32: the Windows agent's seal for its model instances' API keys.

Only :class:`Win32Dpapi` touches Windows, and only when it is built: pywin32 (a Windows-only dependency
of the agent) is imported then, so this module imports on every platform. Everything around it, the
protector and the composition that picks it, is tested on Linux with
:class:`mirbad_runtime.testing.FakeDpapi`; this class itself has not run on a real Windows machine
(``docs/agent.md`` says what remains to check there).
"""

from __future__ import annotations

import importlib
from typing import Any, Final

from mirbad_runtime import Dpapi
from mirbad_runtime.exceptions import DpapiError

__all__ = ["Win32Dpapi"]

# CRYPTPROTECT_UI_FORBIDDEN: a service has no desktop to prompt on; fail instead of waiting for one.
_UI_FORBIDDEN: Final = 0x1
_DESCRIPTION: Final = "mirbad instance key"


class Win32Dpapi(Dpapi):
    """``CryptProtectData`` / ``CryptUnprotectData`` of pywin32's ``win32crypt``, user scope.

    User scope (no ``CRYPTPROTECT_LOCAL_MACHINE``): only the account the agent runs as can open the
    keys, not every account of the machine.

    Raises:
        ModuleNotFoundError: pywin32 is not installed (any platform but Windows).
    """

    def __init__(self) -> None:
        # Imported by name: there are no stubs for pywin32 off Windows, and Linux never gets here.
        self._crypt: Any = importlib.import_module("win32crypt")
        self._error: Any = importlib.import_module("pywintypes").error

    def protect(self, data: bytes, entropy: bytes) -> bytes:
        """Seal ``data`` for the agent's account, bound to ``entropy``."""
        try:
            blob = self._crypt.CryptProtectData(data, _DESCRIPTION, entropy, None, None, _UI_FORBIDDEN)
        except self._error as exc:
            raise DpapiError(f"CryptProtectData failed: {exc}") from exc
        return bytes(blob)

    def unprotect(self, blob: bytes, entropy: bytes) -> bytes:
        """Open a blob sealed for the agent's account with ``entropy``."""
        try:
            _description, data = self._crypt.CryptUnprotectData(blob, entropy, None, None, _UI_FORBIDDEN)
        except self._error as exc:
            raise DpapiError(f"CryptUnprotectData failed: {exc}") from exc
        return bytes(data)
