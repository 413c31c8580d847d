"""What the process driver adds to a launch spec: model root, plumbing flags, the key's environment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from syrupy.assertion import SnapshotAssertion

from mirbad_protocol import ExecutableRef, GpuSelection, ProcessLaunch
from mirbad_runtime import ProcessDriverConfig
from mirbad_runtime._process_launch import (
    check_owned_flags,
    child_environment,
    process_argv,
    resolve_model_path,
)
from mirbad_runtime.exceptions import LaunchRejectedError, ModelPathRejectedError


def _spec(**changes: Any) -> ProcessLaunch:
    fields: dict[str, Any] = {
        "model_id": "tiny",
        "served_name": "tiny",
        "runtime": "llamacpp",
        "argv": ["--model", "m/tiny.gguf", "--alias", "tiny"],
        "model_path": "m/tiny.gguf",
        "budget_gib": 1.0,
        "config_hash": "0123456789abcdef",
        "executable": ExecutableRef(name="llama-server", version="b1"),
        **changes,
    }
    return ProcessLaunch(**fields)


@pytest.fixture
def roots(tmp_path: Path) -> tuple[Path, Path]:
    first, second = tmp_path / "first", tmp_path / "second"
    (first / "m").mkdir(parents=True)
    (second / "m").mkdir(parents=True)
    (second / "m" / "tiny.gguf").write_bytes(b"GGUF")
    (tmp_path / "outside.gguf").write_bytes(b"GGUF")
    return first, second


def test_the_model_resolves_in_the_root_that_holds_it(roots: tuple[Path, Path]) -> None:
    root, target = resolve_model_path(roots, "m/tiny.gguf")

    assert (root, target) == (roots[1].resolve(), (roots[1] / "m" / "tiny.gguf").resolve())


def test_a_folder_model_resolves_too(roots: tuple[Path, Path]) -> None:
    assert resolve_model_path(roots, "m")[0] == roots[0].resolve()


def test_a_symlink_inside_the_root_is_followed(roots: tuple[Path, Path]) -> None:
    (roots[1] / "alias.gguf").symlink_to(roots[1] / "m" / "tiny.gguf")

    assert resolve_model_path(roots, "alias.gguf")[1] == (roots[1] / "m" / "tiny.gguf").resolve()


@pytest.mark.parametrize(
    ("model_path", "reason"),
    [
        ("/etc/passwd", "relative"),
        ("C:/models/x.gguf", "relative"),
        ("m/../../outside.gguf", "'..'"),
        ("..\\outside.gguf", "'..'"),
        ("m/absent.gguf", "no such file"),
    ],
)
def test_paths_outside_the_roots_are_refused(roots: tuple[Path, Path], model_path: str, reason: str) -> None:
    with pytest.raises(ModelPathRejectedError, match=reason) as caught:
        resolve_model_path(roots, model_path)

    assert caught.value.model_path == model_path
    assert isinstance(caught.value, LaunchRejectedError)


def test_a_symlink_leading_out_of_the_root_is_refused(roots: tuple[Path, Path], tmp_path: Path) -> None:
    (roots[0] / "escape.gguf").symlink_to(tmp_path / "outside.gguf")

    with pytest.raises(ModelPathRejectedError, match="leads out"):
        resolve_model_path(roots, "escape.gguf")


@pytest.mark.parametrize(
    "argument", ["--host", "--port", "--port=9", "--api-key", "--api_key=x", "--api-key-file"]
)
def test_flags_the_driver_owns_are_refused(argument: str) -> None:
    with pytest.raises(LaunchRejectedError, match="the agent sets"):
        check_owned_flags(["--model", "m.gguf", argument, "1"])


def test_other_flags_pass() -> None:
    check_owned_flags(["--model", "m.gguf", "--hostname-like", "--ctx-size", "256", "--metrics"])


def test_the_command_line_appends_the_plumbing(tmp_path: Path) -> None:
    argv = process_argv(tmp_path / "llama-server", _spec(), "127.0.0.1", 8123)

    assert argv == [
        str(tmp_path / "llama-server"),
        *["--model", "m/tiny.gguf", "--alias", "tiny"],
        *["--host", "127.0.0.1", "--port", "8123"],
    ]


def test_the_key_travels_in_the_environment_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLAMA_API_KEY", "the-agents-own")
    monkeypatch.setenv("MIRBAD_INHERITED", "yes")

    env = child_environment(_spec(env={"GGML_X": "1"}), inherit=True, key_variable="LLAMA_API_KEY", key="k")
    bare = child_environment(_spec(), inherit=False, key_variable=None, key=None)

    assert (env["LLAMA_API_KEY"], env["GGML_X"], env["MIRBAD_INHERITED"]) == ("k", "1", "yes")
    assert bare == {}


def test_a_spec_may_not_set_the_key_variable() -> None:
    with pytest.raises(LaunchRejectedError, match="LLAMA_API_KEY"):
        child_environment(
            _spec(env={"LLAMA_API_KEY": "x"}), inherit=False, key_variable="LLAMA_API_KEY", key="k"
        )


@pytest.mark.parametrize(
    "gpus",
    [GpuSelection(mode="uuids", uuids=["GPU-1", "GPU-3"]), GpuSelection(mode="none"), GpuSelection()],
    ids=["uuids", "none", "all"],
)
def test_the_gpu_selection_reaches_llama_server_as_cuda_visible_devices(
    gpus: GpuSelection, snapshot_json: SnapshotAssertion
) -> None:
    env = child_environment(
        _spec(gpus=gpus, env={"GGML_X": "1"}), inherit=False, key_variable="LLAMA_API_KEY", key="k"
    )

    assert env == snapshot_json


def test_a_spec_on_chosen_gpus_may_not_set_cuda_visible_devices() -> None:
    spec = _spec(gpus=GpuSelection(mode="uuids", uuids=["GPU-1"]), env={"CUDA_VISIBLE_DEVICES": "0"})

    with pytest.raises(LaunchRejectedError, match="CUDA_VISIBLE_DEVICES"):
        child_environment(spec, inherit=False, key_variable=None, key=None)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"port_range_start": 9000, "port_range_end": 8999}, "port range"),
        ({"port_range_start": 0}, "port range"),
        ({"model_roots": ()}, "model root"),
        ({"stop_timeout_s": 0}, "must be positive"),
    ],
)
def test_the_config_is_validated(tmp_path: Path, changes: dict[str, Any], message: str) -> None:
    fields: dict[str, Any] = {"state_dir": tmp_path, "model_roots": (tmp_path,), **changes}
    with pytest.raises(ValueError, match=message):
        ProcessDriverConfig(**fields)


def test_the_config_places_records_and_logs_in_the_state_dir(tmp_path: Path) -> None:
    config = ProcessDriverConfig(state_dir=tmp_path, model_roots=(tmp_path,))

    assert (config.records_path, config.logs_dir) == (tmp_path / "processes.json", tmp_path / "logs")
    assert dict(config.key_variables) == {"llamacpp": "LLAMA_API_KEY"}
