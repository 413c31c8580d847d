"""The memory probe: /proc/meminfo parsing, the non-Linux stand-in, and the snapshot it builds."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from syrupy.assertion import SnapshotAssertion

from mirbad_protocol import GpuMemory
from mirbad_runtime import DEFAULT_FAKE_TOTAL_GIB, MemoryProbe, parse_meminfo
from mirbad_runtime.exceptions import MeminfoFormatError, MirbadRuntimeError

pytestmark = pytest.mark.anyio

# A DGX Spark's /proc/meminfo (head of the file), as the kernel writes it.
SPARK_MEMINFO = """\
MemTotal:       127535360 kB
MemFree:         9871232 kB
MemAvailable:   100663296 kB
Buffers:          524288 kB
Cached:         88080384 kB
SwapCached:            0 kB
Active:         31457280 kB
Inactive:       70254592 kB
Active(anon):   12582912 kB
HugePages_Total:       0
Hugepagesize:       2048 kB
"""

AT = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
GPU = GpuMemory(index=0, uuid="GPU-0a1b", name="NVIDIA RTX 6000 Ada Generation", total_mib=49140.0)


def _probe(
    tmp_path: Path,
    text: str = SPARK_MEMINFO,
    *,
    reserve_gib: float = 0.0,
    gpu_probe: Callable[[], Awaitable[list[GpuMemory]]] | None = None,
) -> MemoryProbe:
    path = tmp_path / "meminfo"
    path.write_text(text)
    return MemoryProbe(
        meminfo_path=path, linux=True, clock=lambda: AT, reserve_gib=reserve_gib, gpu_probe=gpu_probe
    )


def test_parse_reads_total_and_available_in_gib() -> None:
    assert parse_meminfo(SPARK_MEMINFO) == (127535360 / 1024**2, 100663296 / 1024**2)


def test_parse_uses_the_first_occurrence_and_ignores_other_lines() -> None:
    text = "junk\nMemAvailable: 1048576 kB\nMemTotal: 2097152 kB\nMemTotal: 1 kB\nnot: a number kB\n"
    assert parse_meminfo(text) == (2.0, 1.0)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "no MemTotal or MemAvailable line"),
        ("MemTotal: 1024 kB\n", "no MemAvailable line"),
        ("MemAvailable: 1024 kB\n", "no MemTotal line"),
        ("MemTotal: 1 MB\nMemAvailable: 1 kB\n", "MemTotal is given in 'MB', expected kB"),
    ],
)
def test_parse_names_what_is_missing(text: str, reason: str) -> None:
    with pytest.raises(MeminfoFormatError) as caught:
        parse_meminfo(text)
    assert caught.value.reason == reason
    assert str(caught.value) == f"unreadable meminfo: {reason}"
    assert isinstance(caught.value, MirbadRuntimeError)
    assert isinstance(caught.value, ValueError)


@given(st.text())
def test_parse_never_crashes_on_arbitrary_text(text: str) -> None:
    try:
        total, available = parse_meminfo(text)
    except MeminfoFormatError:
        return
    assert total >= 0
    assert available >= 0


@given(
    total=st.integers(0, 2**50),
    available=st.integers(0, 2**50),
    noise=st.lists(st.sampled_from(["MemFree", "Cached", "Active(anon)", "HugePages_Total"]), max_size=5),
)
def test_parse_round_trips_kernel_style_text(total: int, available: int, noise: list[str]) -> None:
    lines = [f"{key}: {index} kB" for index, key in enumerate(noise)]
    lines.insert(len(lines) // 2, f"MemTotal: {total:>15} kB")
    lines.append(f"MemAvailable:{available:>15} kB")
    assert parse_meminfo("\n".join(lines)) == (total / 1024**2, available / 1024**2)


def test_probe_reads_meminfo_with_reserve(tmp_path: Path, snapshot_json: SnapshotAssertion) -> None:
    snapshot = _probe(tmp_path, reserve_gib=8.0).read()
    assert snapshot.unified
    assert snapshot.reserve_gib == 8.0
    assert snapshot.taken_at == AT
    assert snapshot.to_wire() == snapshot_json


def test_probe_with_discrete_gpus_is_not_unified(tmp_path: Path) -> None:
    snapshot = _probe(tmp_path).read([GPU])
    assert not snapshot.unified
    assert snapshot.gpus == [GPU]


def test_probe_raises_on_a_meminfo_without_the_keys(tmp_path: Path) -> None:
    with pytest.raises(MeminfoFormatError):
        _probe(tmp_path, "MemFree: 1 kB\n").read()


def test_non_linux_reports_the_fake_total(tmp_path: Path) -> None:
    missing = tmp_path / "absent"
    default = MemoryProbe(meminfo_path=missing, linux=False).read()
    assert (default.total_gib, default.available_gib) == (DEFAULT_FAKE_TOTAL_GIB, DEFAULT_FAKE_TOTAL_GIB)
    assert DEFAULT_FAKE_TOTAL_GIB == 121.0
    custom = MemoryProbe(meminfo_path=missing, linux=False, fake_total_gib=64.0, reserve_gib=4.0).read()
    assert (custom.total_gib, custom.available_gib, custom.reserve_gib) == (64.0, 64.0, 4.0)


def test_negative_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        MemoryProbe(reserve_gib=-1.0)


async def test_snapshot_asks_the_gpu_probe(tmp_path: Path) -> None:
    calls: list[str] = []

    async def gpus() -> list[GpuMemory]:
        calls.append("query")
        return [GPU]

    snapshot = await _probe(tmp_path, gpu_probe=gpus).snapshot()
    assert calls == ["query"]
    assert snapshot.gpus == [GPU]
    assert not snapshot.unified


async def test_snapshot_without_a_gpu_probe_is_unified(tmp_path: Path) -> None:
    snapshot = await _probe(tmp_path).snapshot()
    assert snapshot.unified
    assert snapshot.gpus == []
