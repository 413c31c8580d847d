"""The real-component gate: a missing part skips its tests, and fails them when MIRBAD_REQUIRE names it.

Run in a child pytest over a folder of its own that uses this suite's hooks, so the gate is seen
from the outside: the test's fixtures must not start (a real tier's fixture starts servers).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TESTS = """
import pytest
from pathlib import Path


@pytest.fixture
def started() -> None:
    (Path(__file__).parent / "fixture-started").write_text("yes")


@pytest.mark.vllm
def test_needs_vllm(started: None) -> None:
    pass
"""


def _run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    vllm: the vLLM tier\n")
    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import pytest_collection_modifyitems, pytest_runtest_setup  # noqa: F401\n"
    )
    (tmp_path / "test_gate.py").write_text(TESTS)
    environment = {**os.environ, "MIRBAD_VLLM_VENV": str(tmp_path / "no-venv")}
    environment.pop("MIRBAD_REQUIRE", None)  # CI sets it for the whole suite; each test says its own
    environment.update(env)
    argv = [sys.executable, "-m", "pytest", str(tmp_path), "-rs", "-p", "no:cacheprovider"]
    argv += ["-p", "no:randomly", "--rootdir", str(tmp_path), "-c", str(tmp_path / "pytest.ini")]
    return subprocess.run(
        argv, cwd=REPO, env=environment, capture_output=True, text=True, timeout=120, check=False
    )


def test_a_missing_part_skips_with_the_reason(tmp_path: Path) -> None:
    done = _run(tmp_path)
    assert done.returncode == 0, done.stdout
    assert "SKIPPED" in done.stdout
    assert "vllm: no vLLM virtualenv at" in done.stdout
    assert not (tmp_path / "fixture-started").exists()


def test_a_required_missing_part_fails_before_the_test_s_fixtures_start(tmp_path: Path) -> None:
    done = _run(tmp_path, MIRBAD_REQUIRE="vllm")
    assert done.returncode == 1, done.stdout
    assert "MIRBAD_REQUIRE names a missing component: vllm: no vLLM virtualenv at" in done.stdout
    assert not (tmp_path / "fixture-started").exists()
