"""One file's transfer: resumed with HTTP Range from what is on disk, hashed as it streams, verified.

The bytes go to ``<file>.partial``; only a file whose size and digest (:mod:`._digests`) match is
renamed to its real name, so a later resume trusts a file without the suffix and re-reads
(hashes) only the prefix of a partial one. A transfer that falls below the rate floor of its
:class:`NetworkLimits` (a drip-fed or silent body) ends as a stall, and its file work runs on the
caller's thread limiter, never anyio's shared one.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import BinaryIO, Final

import anyio
import anyio.to_thread
import httpx

from mirbad_runtime.exceptions import (
    DownloadVerificationError,
    SourceNeedsTokenError,
    SourceNotFoundError,
    SourceStalledError,
    SourceUnavailableError,
)

from ._digests import FileDigest
from ._network import NetworkLimits, RateFloor
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
    limits: NetworkLimits | None = None,
    threads: anyio.CapacityLimiter | None = None,
) -> None:
    """Fetch ``planned`` to ``target``, resuming a partial file, and verify it.

    Args:
        http: the client the bytes come through.
        planned: the file, its URL, size and digest.
        target: where the verified file lands.
        headers: extra request headers (a token's Authorization).
        progress: told the bytes on disk after every chunk.
        limits: the timeouts and the rate floor (the defaults when None).
        threads: the limiter of the blocking file work (anyio's shared one when None).

    Raises:
        DownloadVerificationError: the size or digest does not match (the partial file is removed), or the
            plan names no digest to check.
        SourceNotFoundError, SourceNeedsTokenError: the source refused.
        SourceUnavailableError: the source failed, broke off, or stalled below the rate floor.
    """
    limits = limits or NetworkLimits()
    if await anyio.to_thread.run_sync(_verified, target, planned.size, limiter=threads):
        return
    partial = target.with_name(target.name + PARTIAL_SUFFIX)
    await anyio.to_thread.run_sync(lambda: partial.parent.mkdir(parents=True, exist_ok=True), limiter=threads)
    offset, digest = await anyio.to_thread.run_sync(_prefix, partial, planned, limiter=threads)
    if offset < planned.size:
        floor = RateFloor(limits.min_bytes_per_second, limits.rate_window_s)
        with floor.scope:
            digest = await _stream(
                http, planned, partial, offset, digest, dict(headers or {}), progress, limits, floor, threads
            )
        if floor.stalled:
            raise SourceStalledError(f"{planned.path}: {floor.reason()}")
    await anyio.to_thread.run_sync(_verify_and_place, planned, partial, target, digest, limiter=threads)


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
    limits: NetworkLimits,
    floor: RateFloor,
    threads: anyio.CapacityLimiter | None,
) -> FileDigest:
    if offset:
        headers["Range"] = f"bytes={offset}-"
    try:
        async with http.stream(
            "GET", planned.url, headers=headers, follow_redirects=True, timeout=limits.timeout()
        ) as response:
            _check_status(response, planned)
            if offset and response.status_code == 200:
                # The server ignored the range: start over rather than append a second copy (with a
                # fresh digest, which the caller verifies against: hence the return).
                offset, digest = 0, _digest(planned)
            elif offset and not _starts_at(response, offset):
                raise SourceUnavailableError(f"{planned.path}: the server resumed at the wrong offset")
            # The file work runs on the download threads: a slow disk holds no thread the agent needs.
            handle = await anyio.to_thread.run_sync(_open_at, partial, offset, limiter=threads)
            try:
                written = offset
                # As the bytes arrive (no re-chunking), each flushed: what a killed agent leaves on disk
                # is everything it received, so a resume asks only for the rest.
                async for chunk in response.aiter_bytes():
                    await anyio.to_thread.run_sync(_append, handle, chunk, limiter=threads)
                    digest.update(chunk)
                    written += len(chunk)
                    floor.arrived(len(chunk))
                    if written > planned.size:
                        break
                    if progress is not None:
                        progress(written)
            finally:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(handle.close, limiter=threads)
    except httpx.HTTPError as exc:
        reason = str(exc) or type(exc).__name__  # a read timeout carries no message
        raise SourceUnavailableError(f"{planned.path}: the transfer broke off: {reason}") from None
    return digest


def _open_at(partial: Path, offset: int) -> BinaryIO:
    handle = partial.open("r+b" if offset else "wb")
    handle.seek(offset)
    handle.truncate()
    return handle


def _append(handle: BinaryIO, chunk: bytes) -> None:
    handle.write(chunk)
    handle.flush()


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
