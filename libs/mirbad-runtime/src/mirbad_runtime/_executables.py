"""The executable catalogue: which binary a logical name and version means on this node.

A launch spec names ``llama-server`` version ``b6000``, never a path: the node's operator lists each
executable with its path and SHA-256 digest, and the catalogue refuses to launch a file whose digest
differs (a binary swapped behind the agent's back). Files are hashed when the catalogue is checked at
start-up and again before every launch, always in a worker thread.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import anyio.to_thread

from mirbad_protocol import ExecutableRef

from .exceptions import DuplicateExecutableError, ExecutableIntegrityError, UnknownExecutableError

__all__ = ["CatalogedExecutable", "ExecutableCatalog", "is_executable_name", "sha256_of_file"]

logger = logging.getLogger(__name__)

_SHA256: Final = re.compile(r"^[0-9a-f]{64}$")
_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True, kw_only=True)
class CatalogedExecutable:
    """One entry of the catalogue, as the node's configuration lists it.

    Attributes:
        name: the logical name launch specs use (``llama-server``).
        version: the version launch specs ask for; one name may be listed with several versions.
        path: the absolute path of the binary.
        sha256: the expected SHA-256 digest of the file, as 64 lowercase hex digits.
    """

    name: str
    version: str
    path: Path
    sha256: str

    def __post_init__(self) -> None:
        if not is_executable_name(self.name):
            raise ValueError(f"{self.name!r} is not a logical executable name")
        if not self.version.strip():
            raise ValueError(f"executable {self.name} has a blank version")
        if not self.path.is_absolute():
            raise ValueError(f"executable {self.name} {self.version}: {self.path} is not an absolute path")
        if not _SHA256.fullmatch(self.sha256):
            raise ValueError(f"executable {self.name} {self.version}: sha256 must be 64 lowercase hex digits")


def is_executable_name(name: str) -> bool:
    """Whether ``name`` can be a logical executable name: a letter or digit, then letters, digits, ``._-``."""
    return _NAME.fullmatch(name) is not None


def sha256_of_file(path: Path) -> str:
    """The hex SHA-256 digest of a file's content (blocking: call it from a worker thread)."""
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


class ExecutableCatalog:
    """Maps ``(name, version)`` to a binary whose digest is checked before it is launched.

    Names compare case-insensitively (a Windows node's file names do), versions exactly.

    Args:
        entries: the configured executables.

    Raises:
        DuplicateExecutableError: two entries share a name and version.
    """

    def __init__(self, entries: Iterable[CatalogedExecutable]) -> None:
        self._entries: dict[tuple[str, str], CatalogedExecutable] = {}
        for entry in entries:
            key = (entry.name.casefold(), entry.version)
            if key in self._entries:
                raise DuplicateExecutableError(entry.name, entry.version)
            self._entries[key] = entry

    @property
    def entries(self) -> list[CatalogedExecutable]:
        """Every entry, sorted by name and version."""
        return sorted(self._entries.values(), key=lambda entry: (entry.name.casefold(), entry.version))

    def __len__(self) -> int:
        return len(self._entries)

    async def verify_all(self) -> list[ExecutableIntegrityError]:
        """Hash every entry now (the start-up check); return the problems, each also logged.

        A failing entry stays listed: :meth:`resolve` checks it again before a launch, so a binary
        that is repaired later becomes usable without a restart.
        """
        problems: list[ExecutableIntegrityError] = []
        for entry in self.entries:
            try:
                await self._verify(entry)
            except ExecutableIntegrityError as problem:
                logger.warning("%s", problem)
                problems.append(problem)
        return problems

    async def resolve(self, ref: ExecutableRef) -> Path:
        """The verified absolute path of ``ref``, hashed again just now.

        Raises:
            UnknownExecutableError: the catalogue does not list that name and version.
            ExecutableIntegrityError: the file is missing, not executable or has another digest.
        """
        entry = self._entries.get((ref.name.casefold(), ref.version))
        if entry is None:
            raise UnknownExecutableError(ref.name, ref.version)
        return await self._verify(entry)

    async def _verify(self, entry: CatalogedExecutable) -> Path:
        path = await anyio.to_thread.run_sync(_real_executable, entry)
        try:
            digest = await anyio.to_thread.run_sync(sha256_of_file, path)
        except OSError as exc:
            raise ExecutableIntegrityError(entry.name, entry.version, entry.path, str(exc)) from exc
        if digest != entry.sha256:
            reason = f"its SHA-256 is {digest}, the catalogue expects {entry.sha256}"
            raise ExecutableIntegrityError(entry.name, entry.version, entry.path, reason)
        return path


def _real_executable(entry: CatalogedExecutable) -> Path:
    # The digest is taken of the file a symlink leads to, and that same file is what gets launched.
    path = entry.path.resolve()
    if not path.is_file():
        raise ExecutableIntegrityError(entry.name, entry.version, entry.path, "no such file")
    if not os.access(path, os.X_OK):
        raise ExecutableIntegrityError(entry.name, entry.version, entry.path, "the file is not executable")
    return path
