"""mlx_lm.server's command line: golden argv, refusals and the parser."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from syrupy.assertion import SnapshotAssertion

from mirbad_orchestration.commandline import build_mlx_args, normalize_mlx, parse_mlx_args
from mirbad_orchestration.exceptions import UnreadableFlagError
from mirbad_protocol import ExecutableRef, InvalidFieldError, ModelDefinition

EXE = ExecutableRef(name="mlx-lm", version="0.28.0")


def _definition(**changes: Any) -> ModelDefinition:
    fields: dict[str, Any] = {
        "id": "qwen-mlx",
        "served_name": "qwen-mlx",
        "runtime": "mlx",
        "executable": EXE,
        "model_path": "mlx-community/Qwen3-8B-4bit",
    }
    return ModelDefinition.model_validate(fields | changes)


def _outcome(**changes: Any) -> list[str] | dict[str, str]:
    try:
        return build_mlx_args(_definition(**changes))
    except InvalidFieldError as exc:
        return {"error": type(exc).__name__, "field": exc.field, "reason": exc.reason}


CASES: dict[str, dict[str, Any]] = {
    "minimal": {},
    "extra args verbatim and in order": {
        "extra_args": ["--decode-concurrency", "8", "--prompt-cache-size=4", "--chat-template-args", "{}"]
    },
    "flags that only start like the agent's stay": {"extra_args": ["--hostname-x", "--portable", "--models"]},
    "windows path": {"model_path": "mlx\\Qwen3-8B-4bit"},
    "--host": {"extra_args": ["--host", "0.0.0.0"]},
    "--port=": {"extra_args": ["--port=9000"]},
    "--port one element": {"extra_args": ["--port 9000"]},
    "--ho (argparse prefix of --host)": {"extra_args": ["--ho", "0.0.0.0"]},
    "--mod (argparse prefix of --model)": {"extra_args": ["--mod", "x"]},
    "--model": {"extra_args": ["--model", "other"]},
    "kv cache dtype": {"kv_cache_dtype": "q8_0"},
    "gpu layers": {"gpu_layers": 10},
    "max batched tokens": {"max_num_batched_tokens": 4096},
}


def test_golden_command_lines_and_refusals(snapshot_json: SnapshotAssertion) -> None:
    assert {name: _outcome(**changes) for name, changes in CASES.items()} == snapshot_json


def test_other_runtimes_are_refused() -> None:
    llama = _definition(runtime="llamacpp")
    with pytest.raises(InvalidFieldError, match="runtime"):
        build_mlx_args(llama)


@pytest.mark.parametrize(
    "prefix",
    [
        [],
        ["mlx_lm.server"],
        ["python3", "-m", "mlx_lm.server"],
        ["python", "-m", "mlx_lm", "server"],
        ["/bin/x"],
    ],
)
def test_parse_skips_the_program_and_drops_the_plumbing(prefix: list[str]) -> None:
    argv = [*prefix, "--host", "127.0.0.1", "--model", "m/q", "--port=8081", "--max-tokens", "64"]
    parsed = parse_mlx_args(argv, model_id="q", executable=EXE)
    assert (parsed.model_path, parsed.served_name, parsed.extra_args) == ("m/q", "q", ["--max-tokens", "64"])


def test_parse_takes_the_served_name_from_the_caller() -> None:
    parsed = parse_mlx_args(["--model=m"], model_id="q", executable=EXE, served_name="Qwen")
    assert parsed.served_name == "Qwen"


@pytest.mark.parametrize(
    ("argv", "field"),
    [(["--max-tokens", "5"], "--model"), (["--model"], "--model"), (["--model", "/abs"], "modelPath")],
)
def test_parse_errors_name_the_field(argv: list[str], field: str) -> None:
    with pytest.raises(InvalidFieldError) as caught:
        parse_mlx_args(argv, model_id="q", executable=EXE)
    assert caught.value.field == field
    assert isinstance(caught.value, UnreadableFlagError) == field.startswith("--")


_EXTRA = st.lists(
    st.sampled_from(
        [
            "--decode-concurrency",
            "8",
            "--trust-remote-code",
            "--temp=0.2",
            "--max-tokens 128",
            "--pipeline",
            "x",
        ]
    ),
    max_size=8,
)


@settings(max_examples=200, deadline=None)
@given(extra=_EXTRA, path=st.sampled_from(["a", "org/model", "deep/er/model-4bit"]))
def test_build_parse_build_is_the_identity(extra: list[str], path: str) -> None:
    definition = _definition(extra_args=extra, model_path=path)
    argv = build_mlx_args(definition)
    parsed = parse_mlx_args(argv, model_id=definition.id, executable=EXE, served_name=definition.served_name)
    assert parsed == normalize_mlx(definition) == normalize_mlx(parsed)
    assert build_mlx_args(parsed) == argv
