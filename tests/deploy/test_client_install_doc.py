"""docs/notebook.md's install command, run as written in a fresh virtualenv made with pip.

Mirbad's packages are not on a package index, so the page tells a notebook user to install the client
from a clone. The command is read from the page's ``sh`` block and run by a shell whose ``python3`` is
the fresh virtualenv's, in the repository root (the page's ``./libs/...`` paths are relative to it); pip
fetches the third-party dependencies from PyPI, as it would for the reader. The client then imports
and builds a request without anything of the master installed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.deploy, pytest.mark.timeout(420)]

ROOT = Path(__file__).parents[2]
DOC = ROOT / "docs" / "notebook.md"
_SECTION = "## Install the client"
_SH = re.compile(r"^```sh\n(.*?)^```$", re.DOTALL | re.MULTILINE)
INSTALL_TIMEOUT_S = 360
# What a client install must not bring: the master and the node's runtimes.
NOT_WITH_THE_CLIENT = ("mirbad_master", "mirbad_orchestration", "mirbad_runtime", "nicegui", "docker")


def install_command() -> str:
    """The one shell command of the page's install section."""
    text = DOC.read_text(encoding="utf-8")
    start = text.index(_SECTION)
    end = text.find("\n## ", start + len(_SECTION))
    blocks: list[str] = _SH.findall(text[start:end])
    [block] = blocks
    return block.strip()


def test_the_page_installs_both_packages_from_the_clone() -> None:
    command = install_command()

    assert "pip install" in command
    assert "./libs/mirbad-protocol" in command
    assert "./libs/mirbad-client" in command
    assert "mirbad-client " not in command.replace("./libs/mirbad-client", "")


def test_the_install_command_works_as_written(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {key: value for key, value in os.environ.items() if key not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"

    installed = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", install_command()],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
        check=False,
    )
    assert installed.returncode == 0, installed.stdout[-2000:] + installed.stderr[-4000:]

    probe = (
        "import sys\n"
        "from mirbad_client import MirbadClient\n"
        "client = MirbadClient('http://127.0.0.1:9', 'password')\n"
        "client.close()\n"
        "print(sorted({name.split('.')[0] for name in sys.modules}))\n"
    )
    imported = subprocess.run(
        [str(venv / "bin" / "python"), "-c", probe],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "'mirbad_client'" in imported
    for package in NOT_WITH_THE_CLIENT:
        assert f"'{package}'" not in imported
