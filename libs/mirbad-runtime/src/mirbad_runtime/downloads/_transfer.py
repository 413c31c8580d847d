"""One file's transfer: resumed with HTTP Range from what is on disk, hashed as it streams, verified.

The bytes go to ``<file>.partial``; only a file whose size and digest (:mod:`._digests`) match is
renamed to its real name, so a later resume trusts a file without the suffix and re-reads
(hashes) only the prefix of a partial one.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

import anyio
import anyio.to_thread
import httpx

from mirbad_runtime.exceptions import (
    DownloadVerificationError,
    SourceNeedsTokenError,
    SourceNotFoundError,
    SourceUnavailableError,
)

from ._digests import FileDigest
from ._sources import PlannedFile

__all__ = ["PARTIAL_SUFFIX", "fetch_file", "on_disk_bytes"]

PARTIAL_SUFFIX: Final = ".partial"
"""The suffix of a file still being written."""
_CHUNK: Final = 1024 * 1024
_CONTENT_RANGE: Final = re.compile(r"bytes (\d+)-\d+/(?:\d+|\*)")

Progress = Callable[[int], None]
"""Told the number of bytes on disk of the file being fetched, after every chunk."""


def on_disk_bytes(target: Path) -> int:
    """How much of the file ``target`` is on disk: all of it when verified, else the partial's size."""
    if target.is_file():
        return target.stat().st_size
    partial = target.with_name(target.name + PARTIAL_SUFFIX)
    return partial.stat().st_size if partial.is_file() else 0


async def fetch_file(
    http: httpx.AsyncClient,
    planned: PlannedFile,
    target: Path,
    *,
    headers: Mapping[str, str] | None = None,
    progress: Progress | None = None,
) -> None:
    """Fetch ``planned`` to ``target``, resuming a partial file, and verify it.

    Raises:
        DownloadVerificationError: the size or digest does not match (the partial file is removed), or the
            plan names no digest to check.
        SourceNotFoundError, SourceNeedsTokenError, SourceUnavailableError: the source refused or failed.
    """
    if await anyio.to_thread.run_sync(_verified, target, planned.size):
        return
    partial = target.with_name(target.name + PARTIAL_SUFFIX)
    await anyio.to_thread.run_sync(lambda: partial.parent.mkdir(parents=True, exist_ok=True))
    offset, digest = await anyio.to_thread.run_sync(_prefix, partial, planned)
    if offset < planned.size:
        await _stream(http, planned, partial, offset, digest, dict(headers or {}), progress)
    await anyio.to_thread.run_sync(_verify_and_place, planned, partial, target, digest)


def _verified(target: Path, size: int) -> bool:
    # Only a verified file loses its .partial suffix, so one of the announced size is done.
    return target.is_file() and target.stat().st_size == size


def _digest(planned: PlannedFile) -> FileDigest:
    try:
        return FileDigest(planned.size, planned.sha256, planned.git_sha1)
    except ValueError as exc:
        raise DownloadVerificationError(planned.path, str(exc)) from None


def _prefix(partial: Path, planned: PlannedFile) -> tuple[int, FileDigest]:
    digest = _digest(planned)
    if not partial.is_file():
        return 0, digest
    if partial.stat().st_size > planned.size:
        partial.unlink()  # longer than announced: nothing of it can be trusted
        return 0, digest
    with partial.open("rb") as handle:
        while block := handle.read(_CHUNK):
            digest.update(block)
    return partial.stat().st_size, digest


async def _stream(
    http: httpx.AsyncClient,
    planned: PlannedFile,
    partial: Path,
    offset: int,
    digest: FileDigest,
    headers: dict[str, str],
    progress: Progress | None,
) -> None:
    if offset:
        headers["Range"] = f"bytes={offset}-"
    try:
        async with http.stream("GET", planned.url, headers=headers, follow_redirects=True) as response:
            _check_status(response, planned)
            if offset and response.status_code == 200:
                # The server ignored the range: start over rather than append a second copy.
                offset, digest = 0, _digest(planned)
            elif offset and not _starts_at(response, offset):
                raise SourceUnavailableError(f"{planned.path}: the server resumed at the wrong offset")
            async with await anyio.open_file(partial, "r+b" if offset else "wb") as handle:
                await handle.seek(offset)
                await handle.truncate()
                written = offset
                # As the bytes arrive (no re-chunking), each flushed: what a killed agent leaves on disk
                # is everything it received, so a resume asks only for the rest.
                async for chunk in response.aiter_bytes():
                    await handle.write(chunk)
                    await handle.flush()
                    digest.update(chunk)
                    written += len(chunk)
                    if written > planned.size:
                        break
                    if progress is not None:
                        progress(written)
    except httpx.HTTPError as exc:
        raise SourceUnavailableError(f"{planned.path}: the transfer broke off: {exc}") from None


def _check_status(response: httpx.Response, planned: PlannedFile) -> None:
    status = response.status_code
    if status in (200, 206):
        return
    if status in (401, 403):
        raise SourceNeedsTokenError(f"{planned.path}: the source refused the file ({status})")
    if status == 404:
        raise SourceNotFoundError("files", f"{planned.path}: the source has no such file any more")
    raise SourceUnavailableError(f"{planned.path}: the source answered {status}")


def _starts_at(response: httpx.Response, offset: int) -> bool:
    match = _CONTENT_RANGE.fullmatch(response.headers.get("content-range", ""))
    return response.status_code == 206 and match is not None and int(match.group(1)) == offset


def _verify_and_place(planned: PlannedFile, partial: Path, target: Path, digest: FileDigest) -> None:
    size = partial.stat().st_size if partial.is_file() else 0
    reason = None
    if size != planned.size:
        reason = f"{size} bytes arrived, the source announced {planned.size}"
    else:
        reason = digest.mismatch()
    if reason is not None:
        with contextlib.suppress(OSError):
            partial.unlink()
        raise DownloadVerificationError(planned.path, reason)
    with partial.open("rb") as handle:
        os.fsync(handle.fileno())
    os.replace(partial, target)
