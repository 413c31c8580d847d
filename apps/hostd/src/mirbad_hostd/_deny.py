"""The hard deny list: units hostd never acts on and never whitelists, whatever the caller sends.

The patterns are compiled in; a root-owned deny file can only add to them. Matching is by
case-insensitive glob on the unit name, and a bare name (``sshd``) is also tried with ``.service``, so
neither spelling slips past a ``*.service``-shaped pattern.
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from ._trusted_files import read_trusted_json
from .exceptions import HostdStartupError, UnitDeniedError

__all__ = ["BUILT_IN_DENY_PATTERNS", "DenyList", "load_deny_list"]

logger = logging.getLogger(__name__)

BUILT_IN_DENY_PATTERNS: Final[tuple[str, ...]] = (
    "ssh*",
    "sshd*",
    "systemd-*",
    "dbus*",
    "docker*",
    "containerd*",
    "NetworkManager*",
    "networkd*",
    "systemd-resolved*",
    "wpa_supplicant*",
    "polkit*",
    "getty*",
    "serial-getty*",
    "nvidia-persistenced*",
    "nvidia-fabricmanager*",
    "nvidia-*driver*",
    "udev*",
    "cron*",
    "rsyslog*",
    "snapd*",
    "apparmor*",
    "ufw*",
    "chrony*",
    "auditd*",
    "user@*",
    "mirbad-hostd*",
    "gdm*",
    "display-manager*",
    "accounts-daemon*",
    "unattended-upgrades*",
    "multipathd*",
    "lvm2*",
)
"""The patterns no setting, file or request can remove (the spec's list; ``mirbad-hostd*`` is hostd)."""

_MAX_PATTERN: Final = 256


class DenyList:
    """The deny patterns in force: the built-in ones, then the deny file's.

    Args:
        extra: patterns from the deny file; they can only add.
    """

    def __init__(self, extra: Iterable[str] = ()) -> None:
        added = [pattern for pattern in extra if pattern not in BUILT_IN_DENY_PATTERNS]
        self._patterns: tuple[str, ...] = (*BUILT_IN_DENY_PATTERNS, *dict.fromkeys(added))

    @property
    def patterns(self) -> tuple[str, ...]:
        """Every pattern, built-in first."""
        return self._patterns

    def match(self, unit: str) -> str | None:
        """The first pattern ``unit`` matches, or None when hostd may manage it."""
        folded = unit.casefold()
        candidates = (folded,) if folded.endswith(".service") else (folded, f"{folded}.service")
        for pattern in self._patterns:
            lowered = pattern.casefold()
            if any(fnmatch.fnmatchcase(name, lowered) for name in candidates):
                return pattern
        return None

    def check(self, unit: str) -> None:
        """Raise when ``unit`` is denied.

        Raises:
            UnitDeniedError: naming the pattern.
        """
        pattern = self.match(unit)
        if pattern is not None:
            raise UnitDeniedError(unit, pattern)


def load_deny_list(path: Path, *, require_root_owner: bool) -> DenyList:
    """The built-in list plus the deny file's patterns (none when the file is absent).

    Raises:
        InsecureHostdFileError: the file is not root-owned or is group/other-writable.
        HostdStartupError: the file is not ``{"patterns": [strings]}``.
    """
    document = read_trusted_json(path, require_root_owner=require_root_owner)
    if document is None:
        return DenyList()
    patterns = document.get("patterns") if isinstance(document, dict) else None
    if (
        not isinstance(document, dict)
        or set(document) != {"patterns"}
        or not isinstance(patterns, list)
        or not all(isinstance(p, str) and 0 < len(p) <= _MAX_PATTERN and p.isprintable() for p in patterns)
    ):
        raise HostdStartupError(f'{path}: malformed: expected {{"patterns": ["glob", ...]}}')
    deny = DenyList(patterns)
    logger.info(
        "deny list: %d built-in patterns, %d from %s", len(BUILT_IN_DENY_PATTERNS), len(patterns), path
    )
    return deny
