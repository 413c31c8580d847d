"""The nvidia-smi probe: its row parser, and real runs of hand-written fake nvidia-smi scripts.

The rows are what nvidia-smi prints for :data:`NVIDIA_SMI_ARGS` (``--format=csv,noheader,nounits``):
index, uuid, name, memory.total and memory.used in MiB, utilization.gpu in percent.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from syrupy.assertion import SnapshotAssertion
from tests._support.hostd import FAKE_NVIDIA_SMI

from mirbad_runtime import NVIDIA_SMI_ARGS, NvidiaSmiProbe, parse_gpu_rows
from mirbad_runtime.exceptions import GpuProbeError

pytestmark = pytest.mark.anyio

TWO_GPUS = """\
0, GPU-5b1c2e7a-93f4-4d0e-8a61-1f2e3d4c5b6a, NVIDIA RTX 6000 Ada Generation, 49140, 1203, 37
1, GPU-0f9e8d7c-6b5a-4c3d-9e2f-a1b2c3d4e5f6, NVIDIA GeForce RTX 4090, 24564, 18, 0
"""

# A DGX Spark: the GB10 shares the system's memory, so nvidia-smi has no size for it.
SPARK = "0, GPU-4c1d9a8e-7b6f-4e3d-a2c1-b0a9f8e7d6c5, NVIDIA GB10, [N/A], [N/A], 0\n"


def test_parse_two_gpus(snapshot_json: SnapshotAssertion) -> None:
    gpus = parse_gpu_rows(TWO_GPUS)
    assert [gpu.uuid for gpu in gpus] == [
        "GPU-5b1c2e7a-93f4-4d0e-8a61-1f2e3d4c5b6a",
        "GPU-0f9e8d7c-6b5a-4c3d-9e2f-a1b2c3d4e5f6",
    ]
    assert [gpu.to_wire() for gpu in gpus] == snapshot_json


def test_a_gpu_without_its_own_memory_is_left_out() -> None:
    assert parse_gpu_rows(SPARK) == []
    assert parse_gpu_rows("0, GPU-a, Tesla, [Not Supported], 0, 0\n1, GPU-b, Tesla, 81920, [N/A], 5\n") == [
        parse_gpu_rows("1, GPU-b, Tesla, 81920, 0, 5")[0]
    ]


def test_a_comma_in_the_name_does_not_shift_the_memory_columns() -> None:
    (gpu,) = parse_gpu_rows("3, GPU-x, Acme Accelerator, Rev 2, 16384, 512, 64\n")
    assert (gpu.index, gpu.name, gpu.total_mib, gpu.used_mib, gpu.utilization_percent) == (
        3,
        "Acme Accelerator, Rev 2",
        16384.0,
        512.0,
        64.0,
    )


def test_the_utilization_is_read_per_gpu() -> None:
    gpus = parse_gpu_rows(TWO_GPUS)
    assert [gpu.utilization_percent for gpu in gpus] == [37.0, 0.0]


@pytest.mark.parametrize("cell", ["[N/A]", "[Not Supported]", "", "-1", "101", "nan", "inf"])
def test_an_unreadable_utilization_is_none_and_the_memory_still_counts(cell: str) -> None:
    (gpu,) = parse_gpu_rows(f"0, GPU-a, vGPU, 16384, 512, {cell}\n")
    assert (gpu.total_mib, gpu.used_mib, gpu.utilization_percent) == (16384.0, 512.0, None)


def test_blank_output_means_no_gpus() -> None:
    assert parse_gpu_rows("") == []
    assert parse_gpu_rows("\n  \n") == []


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ("0, GPU-a, name, 100, 1", "expected 6 columns"),
        ("x, GPU-a, name, 100, 1, 0", "bad GPU index"),
        ("-1, GPU-a, name, 100, 1, 0", "bad GPU index"),
        ("0, , name, 100, 1, 0", "empty GPU UUID"),
        ("0, GPU-a, name, -100, 1, 0", "negative memory size"),
        ("No devices were found", "expected 6 columns"),
    ],
)
def test_unreadable_rows_raise(row: str, reason: str) -> None:
    with pytest.raises(GpuProbeError, match=reason) as caught:
        parse_gpu_rows(row)
    assert repr(row) in caught.value.reason


@given(st.text())
def test_parse_never_crashes_on_arbitrary_text(text: str) -> None:
    try:
        gpus = parse_gpu_rows(text)
    except GpuProbeError:
        return
    assert all(gpu.total_mib >= 0 and gpu.used_mib >= 0 for gpu in gpus)
    assert all(gpu.utilization_percent is None or 0 <= gpu.utilization_percent <= 100 for gpu in gpus)


_NAMES = st.text(st.characters(codec="ascii", categories=["L", "N", "Zs"]), max_size=30).map(str.strip)
_UUIDS = st.from_regex(r"GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", fullmatch=True)


_UTILIZATIONS = st.one_of(st.none(), st.integers(0, 100))
_ROWS = st.tuples(_UUIDS, _NAMES, st.integers(0, 2**20), st.integers(0, 2**20), _UTILIZATIONS)


# No deadline: on a loaded CI box one example can take longer than hypothesis's 200 ms (a timing check).
@settings(deadline=None)
@given(st.lists(_ROWS, max_size=8))
def test_parse_round_trips_nvidia_smi_rows(rows: list[tuple[str, str, int, int, int | None]]) -> None:
    text = "".join(
        f"{i}, {uuid}, {name}, {total}, {used}, {'[N/A]' if busy is None else busy}\n"
        for i, (uuid, name, total, used, busy) in enumerate(rows)
    )
    parsed = parse_gpu_rows(text)
    assert [(g.index, g.uuid, g.name, g.total_mib, g.used_mib, g.utilization_percent) for g in parsed] == [
        (i, uuid, name, float(total), float(used), None if busy is None else float(busy))
        for i, (uuid, name, total, used, busy) in enumerate(rows)
    ]


# ---------------------------------------------------------------- real runs of a fake nvidia-smi


def _fake_nvidia_smi(
    tmp_path: Path, *, stdout: str = "", stderr: str = "", code: int = 0, hang: bool = False
) -> Path:
    """Write an executable ``nvidia-smi`` that records its argv, prints ``stdout`` and exits ``code``."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    (folder / "stdout.txt").write_text(stdout)
    argv_file = shlex.quote(str(folder / "argv.txt"))
    lines = [
        "#!/bin/sh",
        f'printf "%s\\n" "$@" > {argv_file}',
        f"cat {shlex.quote(str(folder / 'stdout.txt'))}",
        f"printf %s {shlex.quote(stderr)} >&2",
        "exec sleep 60" if hang else f"exit {code}",
    ]
    script = folder / "nvidia-smi"
    script.write_text("\n".join(lines) + "\n")
    script.chmod(0o755)
    return script


async def test_query_runs_nvidia_smi_with_the_csv_arguments(tmp_path: Path) -> None:
    script = _fake_nvidia_smi(tmp_path, stdout=TWO_GPUS)
    gpus = await NvidiaSmiProbe(script).query()
    assert gpus == parse_gpu_rows(TWO_GPUS)
    assert (script.parent / "argv.txt").read_text().splitlines() == list(NVIDIA_SMI_ARGS)


async def test_a_missing_nvidia_smi_means_no_gpus(tmp_path: Path) -> None:
    assert await NvidiaSmiProbe(tmp_path / "absent" / "nvidia-smi").query() == []
    assert await NvidiaSmiProbe("mirbad-test-no-such-nvidia-smi").query() == []


async def test_a_failing_nvidia_smi_raises_with_its_message(tmp_path: Path) -> None:
    message = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    script = _fake_nvidia_smi(tmp_path, stdout=message, code=9)
    with pytest.raises(GpuProbeError, match="exited with 9: NVIDIA-SMI has failed") as caught:
        await NvidiaSmiProbe(script).query()
    assert str(caught.value).startswith("GPU probe failed: ")


async def test_stderr_is_preferred_over_stdout_in_the_error(tmp_path: Path) -> None:
    script = _fake_nvidia_smi(
        tmp_path, stdout="partial", stderr="Unable to determine the device handle", code=15
    )
    with pytest.raises(GpuProbeError, match="exited with 15: Unable to determine the device handle"):
        await NvidiaSmiProbe(script).query()


async def test_unreadable_output_raises(tmp_path: Path) -> None:
    script = _fake_nvidia_smi(tmp_path, stdout="index, uuid\n")
    with pytest.raises(GpuProbeError, match="expected 6 columns"):
        await NvidiaSmiProbe(script).query()


async def test_a_hanging_nvidia_smi_is_killed_and_raises(tmp_path: Path) -> None:
    script = _fake_nvidia_smi(tmp_path, hang=True)
    with pytest.raises(GpuProbeError, match=r"did not answer within 0\.3 s"):
        await NvidiaSmiProbe(script, timeout_s=0.3).query()


def test_the_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        NvidiaSmiProbe(timeout_s=0)


async def test_the_stand_in_nvidia_smi_answers_the_probes_query(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe's argv is the stand-in's GPU query, and the stand-in's rows read back as they were set."""
    state, log = tmp_path / "gpu.json", tmp_path / "argv.jsonl"
    gpus = [
        {"index": 0, "uuid": "GPU-a", "name": "H200", "total": 143771, "used": 512, "utilization": 42},
        {"index": 1, "uuid": "GPU-b", "name": "A100", "total": 81920, "used": 0, "utilization": "[N/A]"},
    ]
    state.write_text(json.dumps({"gpus": gpus}))
    monkeypatch.setenv("MIRBAD_FAKE_NVIDIA_SMI_STATE", str(state))
    monkeypatch.setenv("MIRBAD_FAKE_NVIDIA_SMI_LOG", str(log))

    read = await NvidiaSmiProbe(FAKE_NVIDIA_SMI).query()

    assert [(gpu.uuid, gpu.used_mib, gpu.utilization_percent) for gpu in read] == [
        ("GPU-a", 512.0, 42.0),
        ("GPU-b", 0.0, None),
    ]
    assert [json.loads(line) for line in log.read_text().splitlines()] == [list(NVIDIA_SMI_ARGS)]
