"""``mirbad demo`` without a running master: the file it writes and what it says (issue 24 item 1)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests._support.asgi_server import free_port

from mirbad_master.cli import main
from mirbad_master.demo import TINY, TINY_MODEL_PATH
from mirbad_protocol import ModelDefinition
from mirbad_runtime import read_gguf_info

ROOT = Path(__file__).resolve().parents[2]


def test_without_a_password_it_writes_the_model_and_prints_the_command_that_defines_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["demo", "--data-dir", str(tmp_path / "data")])

    out = capsys.readouterr().out
    model = tmp_path / "data" / "models" / TINY_MODEL_PATH
    info = read_gguf_info(model)
    assert status == 0
    assert f"wrote the demo model: {model}" in out
    assert "-d @examples/llamacpp-tiny.json" in out
    assert (info.architecture, info.context_length, info.block_count) == ("llama", TINY.context, TINY.layers)


def test_a_second_run_keeps_the_file_and_a_model_root_moves_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["demo", "--data-dir", str(tmp_path / "data"), "--model-root", str(tmp_path / "models")]
    assert main(args) == 0
    assert main(args) == 0

    out = capsys.readouterr().out
    assert f"demo model already there: {tmp_path / 'models' / TINY_MODEL_PATH}" in out
    assert not (tmp_path / "data" / "models").exists()


def test_a_master_that_does_not_answer_is_exit_1_saying_where_it_looked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "pw").write_text("a-long-enough-password\n")
    url = f"http://127.0.0.1:{free_port()}"

    status = main(
        ["demo", "--data-dir", str(tmp_path), "--url", url, "--password-file", str(tmp_path / "pw")]
    )

    assert status == 1
    assert f"cannot reach the master at {url}" in capsys.readouterr().out


def test_the_readme_example_is_the_chat_model_demo_defines() -> None:
    example = ModelDefinition.from_user_json((ROOT / "examples" / "llamacpp-tiny.json").read_text())
    embeddings = ModelDefinition.from_user_json(
        (ROOT / "examples" / "llamacpp-tiny-embeddings.json").read_text()
    )

    assert "--embeddings" not in example.extra_args
    assert example.model_path == TINY_MODEL_PATH
    assert "--embeddings" in embeddings.extra_args
