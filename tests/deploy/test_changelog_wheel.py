"""The master's wheel ships the repository's CHANGELOG.md, which the Releases page renders.

``uv build`` makes the sdist first (apps/master/pyproject.toml force-includes the root changelog into
the package there) and the wheel from that sdist, so the file is package data wherever it is installed.
"""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

import pytest
from tests._support.real_parts import uv_path

pytestmark = [pytest.mark.deploy, pytest.mark.timeout(180)]

ROOT = Path(__file__).parents[2]


def test_the_master_wheel_carries_the_changelog(tmp_path: Path) -> None:
    uv = uv_path()
    assert uv is not None  # the deploy tier's probe says so before any test runs
    built = subprocess.run(
        [uv, "build", "--package", "mirbad-master", "--out-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-4000:]
    [wheel] = tmp_path.glob("mirbad_master-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        shipped = archive.read("mirbad_master/CHANGELOG.md").decode("utf-8")
    assert shipped == (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
