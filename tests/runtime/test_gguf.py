"""The GGUF header reader against files of the real ``gguf`` package and corrupt or hostile ones."""

from __future__ import annotations

import shutil
import struct
from collections.abc import Mapping
from pathlib import Path

import anyio
import numpy as np
import pytest
from gguf import GGUFReader, GGUFValueType, GGUFWriter
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from syrupy.assertion import SnapshotAssertion
from tests._support.tiny_gguf import TINY

from mirbad_runtime import aread_gguf_info, read_gguf_info
from mirbad_runtime._gguf import MAX_ARRAY_ITEMS, MAX_METADATA_ENTRIES
from mirbad_runtime.exceptions import GgufFormatError, MirbadRuntimeError

# ---------------------------------------------------------------- hand-made headers


def _string(text: str | bytes) -> bytes:
    data = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(data)) + data


def _kv(key: str, code: int, payload: bytes) -> bytes:
    return _string(key) + struct.pack("<I", code) + payload


ARCH = _kv("general.architecture", 8, _string("llama"))


def _header(*entries: bytes, version: int = 3, tensors: int = 0, count: int | None = None) -> bytes:
    declared = len(entries) if count is None else count
    return b"GGUF" + struct.pack("<IQQ", version, tensors, declared) + b"".join(entries)


def _write(tmp_path: Path, data: bytes, name: str = "model.gguf") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def _reason(path: Path) -> str:
    with pytest.raises(GgufFormatError) as caught:
        read_gguf_info(path)
    return caught.value.reason


# ---------------------------------------------------------------- files of the real gguf package


def test_tiny_model_header(tiny_gguf: Path, snapshot_json: SnapshotAssertion) -> None:
    info = read_gguf_info(tiny_gguf)
    assert (info.architecture, info.name, info.version, info.file_type) == ("llama", TINY.name, 3, 0)
    assert (info.block_count, info.embedding_length, info.context_length) == (2, 64, 256)
    assert (info.head_count, info.head_count_kv, info.key_length, info.value_length) == (4, 4, None, None)
    assert info.head_dims() == (16, 16)
    assert info.size_bytes == tiny_gguf.stat().st_size
    reader = GGUFReader(tiny_gguf)
    assert info.tensor_count == len(reader.tensors)
    assert info.vocab_size == len(reader.fields["tokenizer.ggml.tokens"].data)
    # The wire shape, with the size fixed: it moves with the gguf package's padding, not with the reader.
    assert info.model_copy(update={"size_bytes": 1}).to_wire() == snapshot_json


def _write_with_gguf(path: Path, arch: str, values: Mapping[str, tuple[object, GGUFValueType]]) -> Path:
    writer = GGUFWriter(path, arch)
    try:
        for key, (value, kind) in values.items():
            if kind is GGUFValueType.ARRAY:
                writer.add_array(key, value)  # type: ignore[arg-type]
            else:
                writer.add_key_value(key, value, kind)
        writer.add_tensor("dummy.weight", np.zeros(8, dtype=np.float32))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()
    return path


def test_every_value_type_of_the_gguf_package(tmp_path: Path) -> None:
    t = GGUFValueType
    values: dict[str, tuple[object, GGUFValueType]] = {
        "general.name": ("every type", t.STRING),
        "general.file_type": (7, t.UINT32),
        "x.u8": (1, t.UINT8),
        "x.i8": (-1, t.INT8),
        "x.u16": (2, t.UINT16),
        "x.i16": (-2, t.INT16),
        "x.i32": (-3, t.INT32),
        "x.f32": (0.5, t.FLOAT32),
        "x.bool": (True, t.BOOL),
        "x.i64": (-4, t.INT64),
        "x.f64": (1.5, t.FLOAT64),
        "x.long_string": ("x" * 100_000, t.STRING),
        "x.strings": (["a", "bb", "c" * 5000], t.ARRAY),
        "x.floats": ([0.5] * 10_000, t.ARRAY),
        "x.nested": ([[1, 2], [3]], t.ARRAY),
        "qwen2.block_count": (3, t.UINT64),
        "qwen2.context_length": (32768, t.UINT32),
        "qwen2.embedding_length": (1024, t.UINT32),
        "qwen2.attention.head_count": (16, t.UINT32),
        "qwen2.attention.head_count_kv": ([2, 8, 4], t.ARRAY),
        "qwen2.attention.key_length": (128, t.UINT32),
        "qwen2.attention.value_length": (96, t.UINT32),
        "qwen2.vocab_size": (151_936, t.UINT32),
        "qwen2.pooling_type": (1, t.UINT32),
        "split.count": (3, t.UINT16),
    }
    info = read_gguf_info(_write_with_gguf(tmp_path / "every.gguf", "qwen2", values))
    assert info.architecture == "qwen2"
    assert (info.name, info.file_type, info.split_count, info.pooling_type) == ("every type", 7, 3, 1)
    assert (info.block_count, info.context_length, info.embedding_length) == (3, 32768, 1024)
    assert (info.head_count, info.head_count_kv, info.vocab_size) == (16, 8, 151_936)
    assert info.head_dims() == (128, 96)
    assert info.tensor_count == 1


def test_a_long_name_is_skipped_not_read(tmp_path: Path) -> None:
    values = {"general.name": ("n" * 5000, GGUFValueType.STRING)}
    assert read_gguf_info(_write_with_gguf(tmp_path / "m.gguf", "llama", values)).name is None


def test_head_dims_default_to_the_width_over_the_heads(tmp_path: Path) -> None:
    t = GGUFValueType
    values = {"llama.embedding_length": (4096, t.UINT32), "llama.attention.head_count": (32, t.UINT32)}
    info = read_gguf_info(_write_with_gguf(tmp_path / "m.gguf", "llama", values))
    assert info.head_dims() == (128, 128)
    assert info.kv_head_count() == 32  # no GQA key: as many KV heads as heads


def test_version_2_reads_like_version_3(tiny_gguf: Path, tmp_path: Path) -> None:
    data = bytearray(tiny_gguf.read_bytes())
    data[4:8] = struct.pack("<I", 2)
    info = read_gguf_info(_write(tmp_path, bytes(data)))
    assert info.version == 2
    assert info.model_copy(update={"version": 3}) == read_gguf_info(tiny_gguf)


def test_the_tensor_data_is_never_read(tiny_gguf: Path, tmp_path: Path) -> None:
    # Keep the header and metadata only: the reader must not need anything after them.
    fields = GGUFReader(tiny_gguf).fields
    last = fields[list(fields)[-1]]
    end_of_metadata = last.offset + sum(part.nbytes for part in last.parts)
    cut = _write(tmp_path, tiny_gguf.read_bytes()[:end_of_metadata])
    assert read_gguf_info(cut).block_count == TINY.layers
    with pytest.raises(GgufFormatError, match="truncated"):
        read_gguf_info(_write(tmp_path, tiny_gguf.read_bytes()[: end_of_metadata - 1], "short.gguf"))


def test_the_async_reader_gives_the_same_answer(tiny_gguf: Path) -> None:
    assert anyio.run(aread_gguf_info, tiny_gguf) == read_gguf_info(tiny_gguf)


# ---------------------------------------------------------------- refused files


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", "truncated"),
        (b"GGU", "truncated"),
        (b"GGML" + bytes(20), "magic"),
        (_header(version=1), "version 1"),
        (_header(version=4), "version 4"),
        (b"GGUF" + struct.pack(">IQQ", 3, 0, 0), "big-endian"),
        (_header(ARCH, tensors=2**40), "tensors"),
        (_header(ARCH, count=MAX_METADATA_ENTRIES + 1), "metadata entries"),
        (_header(ARCH, count=2**63), "metadata entries"),
        (_header(ARCH, count=2), "truncated"),
        (_header(struct.pack("<Q", 2**62) + b"key"), "longer than"),
        (_header(_string("k") + struct.pack("<I", 13)), "unknown value type 13"),
        (_header(_kv("k", 8, struct.pack("<Q", 2**60)), ARCH), "truncated"),
        (_header(_kv("k", 9, struct.pack("<IQ", 4, MAX_ARRAY_ITEMS + 1))), "more than"),
        (_header(_kv("k", 9, struct.pack("<IQ", 8, 1_000_000))), "claims 1000000 items"),
        (_header(_kv("k", 9, struct.pack("<IQ", 4, 1_000_000))), "truncated"),
        (_header(_kv("k", 9, struct.pack("<IQ", 42, 1))), "unknown item type 42"),
        (_header(_kv("k", 9, struct.pack("<IQIQIQIQ", 9, 1, 9, 1, 9, 1, 9, 1))), "deeper"),
        (_header(), "general.architecture"),
        (_header(_kv("general.architecture", 4, struct.pack("<I", 1))), "general.architecture"),
        (_header(ARCH, _kv("llama.block_count", 8, _string("two"))), "llama.block_count is str"),
        (_header(ARCH, _kv("llama.block_count", 7, b"\x01")), "llama.block_count is bool"),
        (_header(ARCH, _kv("llama.block_count", 5, struct.pack("<i", -2))), "block_count"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_refused_with_a_reason(tmp_path: Path, data: bytes, expected: str) -> None:
    assert expected in _reason(_write(tmp_path, data))


def test_the_error_names_the_file_and_is_a_runtime_error(tmp_path: Path) -> None:
    path = _write(tmp_path, b"nope")
    with pytest.raises(MirbadRuntimeError, match="not a readable GGUF") as caught:
        read_gguf_info(path)
    assert isinstance(caught.value, GgufFormatError)
    assert caught.value.path == path
    assert str(path) in str(caught.value)


def test_a_missing_file_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_gguf_info(tmp_path / "absent.gguf")


# ---------------------------------------------------------------- properties

_SMALL = _header(
    ARCH,
    _kv("general.name", 8, _string("small")),
    _kv("llama.block_count", 4, struct.pack("<I", 2)),
    _kv("llama.attention.head_count_kv", 9, struct.pack("<IQ", 5, 2) + struct.pack("<ii", 2, 4)),
    _kv("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 2) + _string("a") + _string("b")),
    _kv("x.nested", 9, struct.pack("<IQ", 9, 1) + struct.pack("<IQ", 6, 1) + struct.pack("<f", 1.0)),
    tensors=1,
)


def test_the_small_header_reads(tmp_path: Path) -> None:
    info = read_gguf_info(_write(tmp_path, _SMALL))
    assert (info.name, info.block_count, info.head_count_kv, info.vocab_size) == ("small", 2, 4, 2)


def test_every_truncation_of_the_metadata_is_refused(tmp_path: Path) -> None:
    for end in range(len(_SMALL)):
        with pytest.raises(GgufFormatError, match="truncated"):
            read_gguf_info(_write(tmp_path, _SMALL[:end]))


_FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@_FUZZ
@given(data=st.binary(max_size=512))
def test_random_bytes_never_crash(tmp_path: Path, data: bytes) -> None:
    _read_or_refuse(_write(tmp_path, data))


@_FUZZ
@given(flips=st.lists(st.tuples(st.integers(0, len(_SMALL) - 1), st.integers(0, 255)), max_size=6))
def test_corrupted_headers_never_crash(tmp_path: Path, flips: list[tuple[int, int]]) -> None:
    data = bytearray(_SMALL)
    for offset, value in flips:
        data[offset] = value
    _read_or_refuse(_write(tmp_path, bytes(data)))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fraction=st.floats(0, 1), value=st.integers(0, 255))
def test_a_corrupt_real_model_never_crashes(
    tiny_gguf: Path, tmp_path: Path, fraction: float, value: int
) -> None:
    path = tmp_path / "corrupt.gguf"
    shutil.copyfile(tiny_gguf, path)
    size = 12_000  # the metadata of the tiny model lies within its first ~11 KB
    with path.open("r+b") as handle:
        handle.seek(int(fraction * (size - 1)))
        handle.write(bytes([value]))
        handle.truncate(int(fraction * size) + 64)
    _read_or_refuse(path)


def _read_or_refuse(path: Path) -> None:
    """Read ``path``: a GgufInfo or a GgufFormatError with a reason are fine, anything else fails."""
    try:
        info = read_gguf_info(path)
    except GgufFormatError as exc:
        reason = exc.reason
    else:
        reason = info.architecture
    assert reason
