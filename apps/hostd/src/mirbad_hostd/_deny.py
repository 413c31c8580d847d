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

from ._trusted_files import check_trusted, read_trusted_json
from .exceptions import HostdStartupError, UnitDeniedError

__all__ = [
    "BUILT_IN_DENY_PATTERNS",
    "TEMPLATE_INSTANCE_PATTERN",
    "DenyList",
    "load_deny_list",
    "template_of",
]

logger = logging.getLogger(__name__)

BUILT_IN_DENY_PATTERNS: Final[tuple[str, ...]] = (
    # Remote access: whoever controls these controls who can log in to the host as root.
    "ssh*",
    "sshd*",
    "dropbear*",
    "telnet*",
    "*inetd*",
    "rsh*",
    "rlogin*",
    "xrdp*",
    "*vnc*",
    "cockpit*",
    "webmin*",
    "teamviewer*",
    "anydesk*",
    "rustdesk*",
    "tailscale*",
    "zerotier*",
    "openvpn*",
    "wg-quick*",
    "cloudflared*",
    "ngrok*",
    "autossh*",
    # Console and rescue shells: each is a root shell on a terminal (debug-shell sits on tty9).
    "debug-shell*",
    "emergency*",
    "rescue*",
    "*getty*",
    "autovt*",
    # Kernel modules and power: modprobe@X loads any module; kexec, halt, poweroff and reboot end the host.
    "modprobe@*",
    "kmod*",
    "kexec*",
    "halt*",
    "poweroff*",
    "reboot*",
    # Firewalls and networking: stopping nftables flushes the rules; networking takes the host off-line.
    "nftables*",
    "iptables*",
    "ip6tables*",
    "netfilter-persistent*",
    "firewalld*",
    "networking*",
    "systemd-*",
    "dbus*",
    "docker*",
    "containerd*",
    "NetworkManager*",
    "networkd*",
    "systemd-resolved*",
    "wpa_supplicant*",
    "polkit*",
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
    # Mirbad's own units (hostd, the agent, the master): hostd never stops what it serves.
    "mirbad-*",
    "gdm*",
    "display-manager*",
    "accounts-daemon*",
    "unattended-upgrades*",
    "multipathd*",
    "lvm2*",
)
"""The patterns no setting, file or request can remove (the spec's list, widened by issue 31)."""

TEMPLATE_INSTANCE_PATTERN: Final = "*@*"
"""The pattern a refusal names for an instance (``worker@1``) whose template (``worker@.service``) is not
whitelisted: an instance name is whatever the caller writes after the ``@``, so only a template the
operator chose lets instances in."""

_MAX_PATTERN: Final = 256


def template_of(unit: str) -> str | None:
    """The template ``unit`` is an instance of (``worker@.service`` for ``worker@1.service``), or None.

    A template itself (``worker@.service``) and a plain unit are instances of nothing.
    """
    prefix, at, instance = unit.removesuffix(".service").partition("@")
    if not at or not instance:
        return None
    return f"{prefix}@.service"


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
        InsecureHostdFileError: the file, or its folder, is not root-owned or is group/other-writable.
        HostdStartupError: the file is not ``{"patterns": [strings]}``.
    """
    _check_folder(path.parent, require_root_owner=require_root_owner)
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


def _check_folder(folder: Path, *, require_root_owner: bool) -> None:
    """Trust the deny file's folder as the file itself: whoever may write it may delete the file.

    A folder that does not exist holds no deny file (creating it takes root's write on its parent).
    """
    try:
        check_trusted(folder, require_root_owner=require_root_owner)
    except FileNotFoundError:
        return
