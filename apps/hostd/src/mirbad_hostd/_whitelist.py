"""The whitelist: the only units hostd ever starts, stops, restarts, enables or disables.

It lives in ``{state_dir}/whitelist.json`` (folder 0700, file 0600, written atomically) as
``{"services": [...], "seeded": [...]}``. The first start seeds it from ``hostd.json``; an entry added
to ``hostd.json`` later is merged once, and ``seeded`` remembers every name ever merged, so a unit the
operator removed on the Services page does not come back at the next start.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from mirbad_protocol import InvalidFieldError
from mirbad_protocol.hostd import WhitelistEntry, service_name, unit_name
from mirbad_protocol.support import write_json_atomic

from ._deny import DenyList, template_of
from ._trusted_files import check_trusted, read_trusted_json
from .exceptions import HostdStartupError, ServiceExistsError, ServiceNotFoundError

__all__ = ["Seed", "WhitelistStore", "read_seed"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Seed:
    """What ``hostd.json`` holds: the services to seed and whose user managers discovery reads.

    Attributes:
        services: the entries merged into the whitelist once each.
        discover_users: the users whose managers are discovered (default: the seed's user-unit owners).
    """

    services: tuple[WhitelistEntry, ...] = ()
    discover_users: tuple[str, ...] = ()


def read_seed(path: Path, *, require_root_owner: bool) -> Seed:
    """Read ``hostd.json`` (absent: an empty seed).

    Raises:
        InsecureHostdFileError: not root-owned or group/other-writable.
        HostdStartupError: malformed, with the field named.
    """
    document = read_trusted_json(path, require_root_owner=require_root_owner)
    if document is None:
        return Seed()
    if not isinstance(document, dict) or not set(document) <= {"services", "discoverUsers"}:
        raise HostdStartupError(f'{path}: malformed: expected {{"services": [...], "discoverUsers": [...]}}')
    entries = _entries(path, document.get("services", []), strict=True)
    users = document.get("discoverUsers")
    if users is None:
        users = [entry.user for entry in entries if entry.scope == "user" and entry.user]
    if not isinstance(users, list) or not all(isinstance(user, str) and user for user in users):
        raise HostdStartupError(f"{path}: malformed: discoverUsers must be a list of user names")
    return Seed(tuple(entries), tuple(dict.fromkeys(users)))


def _entries(path: Path, raw: object, *, strict: bool) -> list[WhitelistEntry]:
    if not isinstance(raw, list):
        raise HostdStartupError(f"{path}: malformed: services must be a list")
    entries: list[WhitelistEntry] = []
    for index, item in enumerate(raw):
        try:
            entry = WhitelistEntry.from_user_input(item) if strict else WhitelistEntry.from_wire(item)
            service_name(entry.name)
            if unit_name(entry.unit) != entry.unit:
                raise InvalidFieldError("unit", "must end in .service")
            if (entry.scope == "user") != (entry.user is not None):
                raise InvalidFieldError("user", "is required for user units and only for them")
        except (InvalidFieldError, ValueError) as exc:
            raise HostdStartupError(f"{path}: malformed: services.{index}: {exc}") from None
        entries.append(entry)
    return entries


class WhitelistStore:
    """The whitelist in memory and on disk; the only writer of ``whitelist.json``.

    Use :meth:`open` to create one: it checks the folder and the file, drops denied entries and
    merges the seed.
    """

    def __init__(self, path: Path, entries: Iterable[WhitelistEntry], seeded: Iterable[str]) -> None:
        self._path = path
        self._entries = {entry.name: entry for entry in entries}
        self._seeded = list(dict.fromkeys(seeded))
        self._lock = anyio.Lock()

    @classmethod
    def open(cls, path: Path, seed: Seed, deny: DenyList, *, require_root_owner: bool) -> WhitelistStore:
        """Load (or create) the whitelist, drop denied entries, merge unseen seed entries, save.

        Raises:
            InsecureHostdFileError: the folder or the file is not root-owned or is too open.
            HostdStartupError: the file is malformed.
        """
        _ensure_private_folder(path.parent, require_root_owner=require_root_owner)
        document = read_trusted_json(path, require_root_owner=require_root_owner, private=True)
        existed = document is not None
        if document is None:
            document = {"services": [], "seeded": []}
        if not isinstance(document, dict) or not isinstance(document.get("seeded", []), list):
            raise HostdStartupError(f'{path}: malformed: expected {{"services": [...], "seeded": [...]}}')
        entries = _entries(path, document.get("services", []), strict=False)
        seeded = [str(name) for name in document.get("seeded", [])]
        kept = [entry for entry in entries if not _denied(deny, entry, path)]
        store = cls(path, kept, seeded)
        merged = store._merge_seed(seed, deny)
        orphans = store._drop_orphan_instances(path)
        if merged or orphans or not existed or len(kept) != len(entries):
            store._save()
        return store

    def _drop_orphan_instances(self, source: Path) -> bool:
        """Drop instances whose template is not whitelisted (an entry written by hand, an old file)."""
        orphans = [
            entry
            for entry in self._entries.values()
            if (template := template_of(entry.unit)) is not None
            and self.find_unit(template, entry.scope, entry.user) is None
        ]
        for entry in orphans:
            logger.warning(
                "whitelist: dropped %s (%s) from %s: its template is not on the whitelist",
                entry.name,
                entry.unit,
                source,
            )
            del self._entries[entry.name]
        return bool(orphans)

    def _merge_seed(self, seed: Seed, deny: DenyList) -> bool:
        changed = False
        for entry in seed.services:
            if entry.name in self._seeded:
                continue
            self._seeded.append(entry.name)
            changed = True
            if _denied(deny, entry, Path("hostd.json")) or entry.name in self._entries:
                continue
            self._entries[entry.name] = entry
            logger.info("whitelist add service=%s before=null after=%s (seed)", entry.name, _json(entry))
        return changed

    def entries(self) -> list[WhitelistEntry]:
        """Every entry, by name."""
        return [self._entries[name] for name in sorted(self._entries)]

    def get(self, name: str) -> WhitelistEntry:
        """The entry called ``name``.

        Raises:
            ServiceNotFoundError: there is none.
        """
        try:
            return self._entries[name]
        except KeyError:
            raise ServiceNotFoundError(f"no whitelisted service {name!r}") from None

    def find_unit(self, unit: str, scope: str, user: str | None) -> WhitelistEntry | None:
        """The entry of ``unit`` on that manager, if it is whitelisted."""
        return next(
            (e for e in self._entries.values() if (e.unit, e.scope, e.user) == (unit, scope, user)), None
        )

    async def add(self, entry: WhitelistEntry) -> None:
        """Add ``entry`` and save.

        Raises:
            ServiceExistsError: the name, or the unit on that manager, is whitelisted already.
        """
        async with self._lock:
            if entry.name in self._entries or self.find_unit(entry.unit, entry.scope, entry.user):
                raise ServiceExistsError(f"{entry.name} ({entry.unit}) is on the whitelist already")
            self._entries[entry.name] = entry
            await anyio.to_thread.run_sync(self._save)
            logger.info("whitelist add service=%s before=null after=%s", entry.name, _json(entry))

    async def replace(self, entry: WhitelistEntry) -> WhitelistEntry:
        """Replace the entry of the same name and save; return the previous one.

        Raises:
            ServiceNotFoundError: there is no entry of that name.
        """
        async with self._lock:
            before = self.get(entry.name)
            self._entries[entry.name] = entry
            await anyio.to_thread.run_sync(self._save)
            logger.info(
                "whitelist update service=%s before=%s after=%s", entry.name, _json(before), _json(entry)
            )
            return before

    async def remove(self, name: str) -> WhitelistEntry:
        """Remove the entry called ``name`` and save; its name stays in ``seeded``.

        Raises:
            ServiceNotFoundError: there is none.
        """
        async with self._lock:
            before = self.get(name)
            del self._entries[name]
            await anyio.to_thread.run_sync(self._save)
            logger.info("whitelist remove service=%s before=%s after=null", name, _json(before))
            return before

    def _save(self) -> None:
        document = {"services": [e.to_wire() for e in self.entries()], "seeded": self._seeded}
        write_json_atomic(self._path, document, mode=0o600)


def _denied(deny: DenyList, entry: WhitelistEntry, source: Path) -> bool:
    pattern = deny.match(entry.unit) or deny.match(entry.name)
    if pattern is not None:
        logger.warning(
            "whitelist: dropped %s (%s) from %s: denied by pattern %r",
            entry.name,
            entry.unit,
            source,
            pattern,
        )
    return pattern is not None


def _ensure_private_folder(folder: Path, *, require_root_owner: bool) -> None:
    if not folder.exists():
        folder.mkdir(mode=0o700, parents=True)
        os.chmod(folder, 0o700)  # mkdir's mode is masked by the umask
    check_trusted(folder, require_root_owner=require_root_owner, private=True)


def _json(entry: WhitelistEntry) -> str:
    wire: dict[str, Any] = entry.to_wire()
    return json.dumps(wire, sort_keys=True, ensure_ascii=False)
