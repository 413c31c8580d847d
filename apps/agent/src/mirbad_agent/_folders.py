"""The model roots as the master sees them: folder listings and file lookups that never leave a root.

A request names a path relative to a root, with forward or backward slashes between segments.
Absolute paths, drive letters, ``..`` segments and NUL bytes are refused before the file system is
touched; what is left is resolved with every symlink followed, and refused when the real path is not
inside the real root. An entry of a listing that is a symlink leading out of the root is left out
rather than shown.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import anyio.to_thread

from mirbad_protocol.agent import (
    MAX_MODEL_CONFIG_BYTES,
    AgentErrorCode,
    FolderEntry,
    FolderListing,
    GgufInfo,
    ModelConfigInfo,
    ModelFile,
)
from mirbad_runtime import read_gguf_info

from .exceptions import PathNotFoundError, PathRefusedError, RequestRefusedError

__all__ = ["DEFAULT_LISTING_LIMIT", "ModelFolders", "relative_parts"]

DEFAULT_LISTING_LIMIT: Final = 10_000
"""The most entries one listing returns; a bigger folder is reported truncated."""

_DRIVE: Final = re.compile(r"^[A-Za-z]:")


def relative_parts(path: str) -> tuple[str, ...]:
    """The segments of a root-relative path, with empty and ``.`` segments dropped.

    Raises:
        PathRefusedError: the path is absolute, has a drive letter, a ``..`` segment or a NUL byte.
    """
    if "\x00" in path:
        raise PathRefusedError(path, "it contains a NUL byte")
    text = path.replace("\\", "/")
    if text.startswith("/") or _DRIVE.match(text):
        raise PathRefusedError(path, "it must be relative to a model root")
    parts = tuple(part for part in text.split("/") if part not in ("", "."))
    if ".." in parts:
        raise PathRefusedError(path, "'..' segments are not allowed")
    return parts


class ModelFolders:
    """Listings and file lookups under the node's model roots (blocking work runs in worker threads).

    Args:
        roots: the model roots, in the order paths are searched.
        listing_limit: the most entries one listing returns.
        mount: the folder the container driver mounts at ``/models`` when it is not one of the roots;
            :meth:`present` looks there too (a vLLM model's files are read from it), listings do not.
        hub_cache: the Hugging Face hub cache the model containers fill (what vLLM downloads a hub
            id into); :meth:`model_config` looks there last (a drafter given as a hub id).
    """

    def __init__(
        self,
        roots: Sequence[Path],
        *,
        listing_limit: int = DEFAULT_LISTING_LIMIT,
        mount: Path | None = None,
        hub_cache: Path | None = None,
    ) -> None:
        self.roots = tuple(roots)
        self.listing_limit = listing_limit
        self._model_roots = self.roots + ((mount,) if mount is not None and mount not in self.roots else ())
        self._config_roots = self._model_roots + ((hub_cache,) if hub_cache is not None else ())

    async def list_folder(self, root: int, path: str) -> FolderListing:
        """List the folder ``path`` under root number ``root``.

        Raises:
            RequestRefusedError: there is no root with that index, or the path is a file.
            PathRefusedError: the path is refused (see :func:`relative_parts`) or leads out of the root.
            PathNotFoundError: nothing is there.
        """
        if not 0 <= root < len(self.roots):
            raise RequestRefusedError(
                AgentErrorCode.INVALID_REQUEST, f"this node has no model root {root}", field="root"
            )
        return await anyio.to_thread.run_sync(self._list, root, path)

    async def find_file(self, path: str) -> Path:
        """The real path of the file ``path`` in the first root that has it.

        Raises:
            RequestRefusedError: the path is a folder.
            PathRefusedError: the path is refused or leads out of its root.
            PathNotFoundError: no root has it.
        """
        return await anyio.to_thread.run_sync(self._find_file, path)

    async def present(self, paths: Sequence[str]) -> list[ModelFile]:
        """Whether each of ``paths`` (a file or a folder) is under a model root, as a launch finds it.

        A path that would be refused (absolute, ``..``, leading out of its root) reads as not present:
        the question is asked for every saved model, and one bad definition must not fail the others.
        """
        return await anyio.to_thread.run_sync(self._present, tuple(paths))

    async def gguf_info(self, path: str) -> GgufInfo:
        """The header facts of the GGUF file ``path`` (found as :meth:`find_file` finds it).

        Raises:
            GgufFormatError: the file is not a readable GGUF file.
        """
        found = await self.find_file(path)
        return await anyio.to_thread.run_sync(read_gguf_info, found)

    async def model_config(self, path: str) -> ModelConfigInfo:
        """The ``config.json`` and weights' size of the model folder ``path`` (found as a launch finds it).

        A Hugging Face cache repo folder (``models--org--name``, under a root that is a hub cache or
        in the containers' hub cache) answers for the snapshot its ``refs/main`` names.

        Raises:
            RequestRefusedError: the path is a file (``invalid_request``, field ``path``), or its
                ``config.json`` is over :data:`~mirbad_protocol.agent.MAX_MODEL_CONFIG_BYTES` or not a JSON
                object (``config_unreadable``).
            PathRefusedError: the path is refused or leads out of its root.
            PathNotFoundError: no root has the folder, or it has no ``config.json``.
        """
        return await anyio.to_thread.run_sync(self._model_config, path)

    def _model_config(self, path: str) -> ModelConfigInfo:
        parts = relative_parts(path)
        if not parts:
            raise RequestRefusedError(
                AgentErrorCode.INVALID_REQUEST, "a folder path is required", field="path"
            )
        for root in self._config_roots:
            try:
                real_root, target = _resolve(root, parts, path)
            except PathNotFoundError:
                continue
            if not target.is_dir():
                raise RequestRefusedError(
                    AgentErrorCode.INVALID_REQUEST, f"{path!r} is a file, not a model folder", field="path"
                )
            return _read_model_config(real_root, _hub_snapshot(real_root, target, path), path)
        raise PathNotFoundError(path)

    def _list(self, root: int, path: str) -> FolderListing:
        parts = relative_parts(path)
        real_root, target = _resolve(self.roots[root], parts, path)
        if not target.is_dir():
            raise RequestRefusedError(
                AgentErrorCode.INVALID_REQUEST, f"{path!r} is a file, not a folder", field="path"
            )
        entries: list[FolderEntry] = []
        truncated = False
        with os.scandir(target) as scan:
            for item in scan:
                entry = _entry(item, real_root)
                if entry is None:
                    continue
                if len(entries) == self.listing_limit:
                    truncated = True
                    break
                entries.append(entry)
        entries.sort(key=lambda entry: entry.name)
        return FolderListing(root=root, path="/".join(parts), entries=entries, truncated=truncated)

    def _find_file(self, path: str) -> Path:
        parts = relative_parts(path)
        if not parts:
            raise RequestRefusedError(AgentErrorCode.INVALID_REQUEST, "a file path is required", field="path")
        for root in self.roots:
            try:
                _, target = _resolve(root, parts, path)
            except PathNotFoundError:
                continue
            if not target.is_file():
                raise RequestRefusedError(
                    AgentErrorCode.INVALID_REQUEST, f"{path!r} is not a file", field="path"
                )
            return target
        raise PathNotFoundError(path)

    def _present(self, paths: tuple[str, ...]) -> list[ModelFile]:
        return [ModelFile(path=path, present=self._is_present(path)) for path in paths]

    def _is_present(self, path: str) -> bool:
        try:
            parts = relative_parts(path)
        except PathRefusedError:
            return False
        for root in self._model_roots:
            try:
                _resolve(root, parts, path)
            except PathNotFoundError:
                continue
            except PathRefusedError:
                return False
            return bool(parts)
        return False


def _hub_snapshot(real_root: Path, folder: Path, path: str) -> Path:
    """A Hugging Face cache repo folder (``models--org--name``) read as the snapshot its ``refs/main`` names.

    Any other folder is itself. The snapshot must stay inside the root like any other path.
    """
    ref = folder / "refs" / "main"
    if (folder / "config.json").exists() or not ref.is_file():
        return folder
    revision = ref.read_text(encoding="ascii", errors="replace").strip()
    if not revision or "/" in revision or "\\" in revision or revision in (".", ".."):
        return folder
    _, snapshot = _resolve(real_root, (*folder.relative_to(real_root).parts, "snapshots", revision), path)
    return snapshot


def _read_model_config(real_root: Path, folder: Path, path: str) -> ModelConfigInfo:
    try:
        _, config_path = _resolve(real_root, (*folder.relative_to(real_root).parts, "config.json"), path)
    except PathNotFoundError:
        raise PathNotFoundError(path, "the folder has no config.json") from None
    with config_path.open("rb") as file:
        # One byte over the cap tells a file at the cap from a bigger one without reading it all.
        raw = file.read(MAX_MODEL_CONFIG_BYTES + 1)
    if len(raw) > MAX_MODEL_CONFIG_BYTES:
        raise RequestRefusedError(
            AgentErrorCode.CONFIG_UNREADABLE,
            f"{path!r}: config.json is over {MAX_MODEL_CONFIG_BYTES} bytes",
            field="path",
        )
    try:
        config = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RequestRefusedError(
            AgentErrorCode.CONFIG_UNREADABLE, f"{path!r}: config.json is not JSON ({exc})", field="path"
        ) from None
    if not isinstance(config, dict):
        raise RequestRefusedError(
            AgentErrorCode.CONFIG_UNREADABLE, f"{path!r}: config.json is not a JSON object", field="path"
        )
    sizes = _weights_sizes(folder, real_root)
    return ModelConfigInfo(path=path, config=config, weights_bytes=sum(sizes), weights_files=len(sizes))


def _weights_sizes(folder: Path, real_root: Path) -> list[int]:
    """The sizes of the folder's safetensors files, else its ``.bin`` ones (what vLLM would load)."""
    found: dict[str, list[int]] = {".safetensors": [], ".bin": []}
    with os.scandir(folder) as scan:
        for item in scan:
            suffix = os.path.splitext(item.name)[1].lower()
            if suffix not in found:
                continue
            try:
                real = Path(item.path).resolve(strict=True)
                info = real.stat()
            except (OSError, RuntimeError):
                continue  # a dangling link: no weights there
            if real.is_relative_to(real_root) and stat.S_ISREG(info.st_mode):
                found[suffix].append(info.st_size)
    return found[".safetensors"] or found[".bin"]


def _resolve(root: Path, parts: tuple[str, ...], path: str) -> tuple[Path, Path]:
    try:
        real_root = root.resolve(strict=True)
        target = real_root.joinpath(*parts).resolve(strict=True)
    except (OSError, RuntimeError):
        # RuntimeError: a symlink loop on Python versions that do not raise OSError for it.
        raise PathNotFoundError(path) from None
    if not target.is_relative_to(real_root):
        raise PathRefusedError(path, "it leads out of the model root")
    return real_root, target


def _entry(item: os.DirEntry[str], real_root: Path) -> FolderEntry | None:
    try:
        if item.is_symlink():
            real = Path(item.path).resolve(strict=True)
            if not real.is_relative_to(real_root):
                return None
            info = real.stat()
        else:
            info = item.stat(follow_symlinks=False)
    except (OSError, RuntimeError):
        return None  # a dangling link, or an entry removed while listing
    if stat.S_ISDIR(info.st_mode):
        return FolderEntry(name=item.name, kind="directory")
    if stat.S_ISREG(info.st_mode):
        return FolderEntry(name=item.name, kind="file", size_bytes=info.st_size)
    return None
