"""The GGUF header reader: a model's hyperparameters without loading its (many GB of) tensor data.

A GGUF file starts with ``GGUF``, a version, the tensor and metadata counts, then typed key/value
pairs; the tensor index and data follow and are never read here. The reader streams the metadata,
skipping big values (vocabularies, merges, embedded tokenizer JSON) by seeking, and checks every count
and length against the bytes the file really has, so a corrupt or hostile header fails fast with
:class:`GgufFormatError` instead of allocating or looping for ever.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final

import anyio.to_thread
from pydantic import ValidationError

from mirbad_protocol.agent import GgufInfo

from .exceptions import GgufFormatError

__all__ = ["aread_gguf_info", "read_gguf_info"]

_MAGIC: Final = b"GGUF"
_VERSIONS: Final = (2, 3)
MAX_METADATA_ENTRIES: Final = 1 << 16
MAX_TENSORS: Final = 1 << 20
MAX_KEY_BYTES: Final = 1 << 16
MAX_ARRAY_ITEMS: Final = 1 << 24
MAX_ARRAY_DEPTH: Final = 3
# Values longer than this are skipped, never read: only short names and numbers matter here.
_KEPT_STRING_BYTES: Final = 1024
# Integer arrays up to this length are read (per-layer hyperparameters); longer ones are skipped.
_KEPT_ARRAY_ITEMS: Final = 4096

_STRING: Final = 8
_ARRAY: Final = 9
_BOOL: Final = 7
# GGUF value type codes 0-7 and 10-12 are fixed-size scalars (8 = string, 9 = array), in struct letters.
_SCALARS: Final = {
    code: struct.Struct("<" + letter)
    for code, letter in zip((0, 1, 2, 3, 4, 5, 6, 7, 10, 11, 12), "BbHhIif?Qqd", strict=True)
}
_FLOATS: Final = frozenset({6, 12})
_U32: Final = struct.Struct("<I")
_U64: Final = struct.Struct("<Q")


@dataclass(frozen=True)
class _IntArray:
    """A short integer array, kept by its largest element (per-layer head counts)."""

    count: int
    largest: int | None


@dataclass(frozen=True)
class _Skipped:
    """A value that was skipped; an array keeps its length (the vocabulary size), a long string None."""

    count: int | None = None


_Value = int | float | bool | str | _IntArray | _Skipped


def read_gguf_info(path: str | os.PathLike[str]) -> GgufInfo:
    """Read the header and metadata of the GGUF file at ``path`` (blocking; see :func:`aread_gguf_info`).

    Raises:
        GgufFormatError: the file is not a little-endian GGUF v2/v3 file, is truncated inside its
            metadata, or breaks one of the reader's bounds.
        OSError: the file cannot be opened or read.
    """
    path = Path(path)
    with path.open("rb") as handle:
        stream = _Stream(handle, path, os.fstat(handle.fileno()).st_size)
        version, tensor_count, metadata = _read_header(stream)
    return _to_info(path, version, tensor_count, stream.size, metadata)


async def aread_gguf_info(path: str | os.PathLike[str]) -> GgufInfo:
    """Read the header of a GGUF file in a worker thread, keeping the event loop free.

    Raises:
        GgufFormatError: as :func:`read_gguf_info`.
        OSError: as :func:`read_gguf_info`.
    """
    return await anyio.to_thread.run_sync(read_gguf_info, path)


class _Stream:
    """A bounds-checked little-endian reader that knows how many bytes the file has left."""

    def __init__(self, handle: BinaryIO, path: Path, size: int) -> None:
        self.handle, self.path, self.size, self.offset = handle, path, size, 0

    def fail(self, reason: str) -> GgufFormatError:
        return GgufFormatError(self.path, reason)

    def _reserve(self, count: int, what: str) -> None:
        if count > self.size - self.offset:
            raise self.fail(f"truncated: {what} needs {count} bytes at offset {self.offset}")
        self.offset += count

    def take(self, count: int, what: str) -> bytes:
        start = self.offset
        self._reserve(count, what)
        data = self.handle.read(count)
        if len(data) != count:
            raise self.fail(f"truncated: {what} at offset {start} (the file shrank while being read)")
        return data

    def skip(self, count: int, what: str) -> None:
        self._reserve(count, what)
        self.handle.seek(count, os.SEEK_CUR)

    def u32(self, what: str) -> int:
        return int(_U32.unpack(self.take(4, what))[0])

    def u64(self, what: str) -> int:
        return int(_U64.unpack(self.take(8, what))[0])

    def scalar(self, code: int, what: str) -> int | float | bool:
        layout = _SCALARS[code]
        value: int | float | bool = layout.unpack(self.take(layout.size, what))[0]
        return value

    def string(self, what: str, limit: int) -> str | None:
        """Read a length-prefixed string of at most ``limit`` bytes, or skip a longer one (None)."""
        length = self.u64(f"the length of {what}")
        if length > limit:
            self.skip(length, what)
            return None
        return self.take(length, what).decode("utf-8", errors="replace")


def _read_header(stream: _Stream) -> tuple[int, int, dict[str, _Value]]:
    if stream.take(4, "the magic") != _MAGIC:
        raise stream.fail("the file does not start with the GGUF magic")
    version = stream.u32("the version")
    if version not in _VERSIONS:
        raise stream.fail(_version_problem(version))
    tensor_count = stream.u64("the tensor count")
    entries = stream.u64("the metadata count")
    if tensor_count > MAX_TENSORS:
        raise stream.fail(f"{tensor_count} tensors is more than the {MAX_TENSORS} allowed")
    if entries > MAX_METADATA_ENTRIES:
        raise stream.fail(f"{entries} metadata entries is more than the {MAX_METADATA_ENTRIES} allowed")
    metadata: dict[str, _Value] = {}
    for index in range(entries):
        length = stream.u64(f"the length of metadata key #{index}")
        if length > MAX_KEY_BYTES:
            raise stream.fail(
                f"metadata key #{index} is {length} bytes, longer than the {MAX_KEY_BYTES} allowed"
            )
        key = stream.take(length, f"metadata key #{index}").decode("utf-8", errors="replace")
        metadata[key] = _read_value(stream, stream.u32(f"the type of {key!r}"), key, depth=0)
    return version, tensor_count, metadata


def _version_problem(version: int) -> str:
    if version in {int.from_bytes(v.to_bytes(4, "little"), "big") for v in _VERSIONS}:
        return "big-endian GGUF files are not supported"
    if version == 1:
        return "GGUF version 1 (before August 2023) is not supported"
    return f"GGUF version {version} is not supported (only 2 and 3)"


def _read_value(stream: _Stream, code: int, key: str, *, depth: int) -> _Value:
    if code in _SCALARS:
        return stream.scalar(code, repr(key))
    if code == _STRING:
        text = stream.string(repr(key), _KEPT_STRING_BYTES)
        return _Skipped() if text is None else text
    if code == _ARRAY:
        return _read_array(stream, key, depth=depth)
    raise stream.fail(f"{key!r} has the unknown value type {code}")


def _read_array(stream: _Stream, key: str, *, depth: int) -> _Value:
    if depth >= MAX_ARRAY_DEPTH:
        raise stream.fail(f"{key!r} nests arrays deeper than {MAX_ARRAY_DEPTH} levels")
    code = stream.u32(f"the item type of {key!r}")
    count = stream.u64(f"the length of {key!r}")
    if count > MAX_ARRAY_ITEMS:
        raise stream.fail(f"{key!r} has {count} items, more than the {MAX_ARRAY_ITEMS} allowed")
    if code in _SCALARS:
        layout = _SCALARS[code]
        if count <= _KEPT_ARRAY_ITEMS and code not in _FLOATS and code != _BOOL:
            data = stream.take(layout.size * count, repr(key))
            return _IntArray(count, max((int(v[0]) for v in layout.iter_unpack(data)), default=None))
        stream.skip(layout.size * count, repr(key))
        return _Skipped(count)
    if code not in {_STRING, _ARRAY}:
        raise stream.fail(f"{key!r} has the unknown item type {code}")
    # Every item takes at least 8 bytes, so a count the file cannot hold is refused before looping.
    if count * 8 > stream.size - stream.offset:
        raise stream.fail(f"truncated: {key!r} claims {count} items at offset {stream.offset}")
    for _ in range(count):
        if code == _STRING:
            stream.skip(stream.u64(f"an item length of {key!r}"), repr(key))
        else:
            _read_array(stream, key, depth=depth + 1)
    return _Skipped(count)


def _to_info(path: Path, version: int, tensors: int, size: int, metadata: dict[str, _Value]) -> GgufInfo:
    architecture = metadata.get("general.architecture")
    if not isinstance(architecture, str) or not architecture:
        raise GgufFormatError(path, "general.architecture is missing or not a short string")
    reader = _Fields(path, metadata, architecture)
    vocab = reader.count(f"{architecture}.vocab_size")
    tokens = metadata.get("tokenizer.ggml.tokens")
    if vocab is None and isinstance(tokens, _Skipped | _IntArray):
        vocab = tokens.count  # the length of the token list, never read
    name = metadata.get("general.name")
    try:
        return GgufInfo(
            version=version,
            architecture=architecture,
            name=name if isinstance(name, str) else None,
            file_type=reader.count("general.file_type"),
            tensor_count=tensors,
            size_bytes=size,
            split_count=reader.count("split.count") or 0,
            block_count=reader.arch_count("block_count"),
            context_length=reader.arch_count("context_length"),
            embedding_length=reader.arch_count("embedding_length"),
            head_count=reader.arch_count("attention.head_count"),
            head_count_kv=reader.arch_count("attention.head_count_kv"),
            key_length=reader.arch_count("attention.key_length"),
            value_length=reader.arch_count("attention.value_length"),
            vocab_size=vocab,
            pooling_type=reader.arch_count("pooling_type"),
        )
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        raise GgufFormatError(path, f"{'.'.join(map(str, error['loc']))}: {error['msg']}") from None


@dataclass(frozen=True)
class _Fields:
    """Typed look-ups in the metadata, failing with the key's name when a value has the wrong type."""

    path: Path
    metadata: dict[str, _Value]
    architecture: str

    def count(self, key: str) -> int | None:
        value = self.metadata.get(key)
        if value is None or isinstance(value, _Skipped):
            return None
        if isinstance(value, _IntArray):
            return value.largest
        if isinstance(value, bool) or not isinstance(value, int):
            raise GgufFormatError(self.path, f"{key} is {type(value).__name__}, expected an integer")
        return value

    def arch_count(self, suffix: str) -> int | None:
        return self.count(f"{self.architecture}.{suffix}")
