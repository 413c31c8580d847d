"""The ``mirbad`` command line: ``mirbad args`` in its three modes, and its one-line errors."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from syrupy.assertion import SnapshotAssertion

from mirbad_master.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *argv: str, stdin: str = ""
) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.json")))
def test_args_prints_the_argv_of_each_example(
    example: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    snapshot_json: SnapshotAssertion,
) -> None:
    code, out, err = run(monkeypatch, capsys, "args", str(EXAMPLES / example), "--total-gib", "121")
    assert (code, err) == (0, "")
    argv = json.loads(out)
    assert isinstance(argv, list)
    assert argv == snapshot_json


def test_normalize_lifts_owned_flags(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(monkeypatch, capsys, "args", "--normalize", str(EXAMPLES / "vllm-qwen3.json"))
    assert code == 0
    normalized = json.loads(out)
    assert normalized["maxNumSeqs"] == 48
    assert normalized["extraArgs"] == ["--trust-remote-code"]


def test_parse_reads_an_argv_back(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _, built, _ = run(monkeypatch, capsys, "args", str(EXAMPLES / "vllm-qwen3.json"))
    code, out, err = run(monkeypatch, capsys, "args", "--parse", "--id", "qwen3-30b", stdin=built)
    assert (code, err) == (0, "")
    parsed = json.loads(out)
    assert parsed["id"] == "qwen3-30b"
    assert parsed["servedName"] == "qwen3-30b-a3b"
    assert parsed["maxNumSeqs"] == 48
    _, rebuilt, _ = run(monkeypatch, capsys, "args", "-", stdin=out)
    assert json.loads(rebuilt) == json.loads(built)


def test_parse_detects_llama_server(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["/opt/llama/llama-server", "--model", "m.gguf", "--alias", "My_Model.v2", "--ctx-size", "512"]
    code, out, err = run(monkeypatch, capsys, "args", "--parse", stdin=json.dumps(argv))
    assert (code, err) == (0, "")
    parsed = json.loads(out)
    assert parsed["runtime"] == "llamacpp"
    assert parsed["id"] == "my-model-v2"


@pytest.mark.parametrize(
    ("argv", "stdin", "needle"),
    [
        (["args"], "", "FILE"),
        (["args", "/nonexistent/model.json"], "", "/nonexistent/model.json"),
        (["args", "-"], "{", "(document): not valid JSON"),
        (
            ["args", "-"],
            '{"id": "x", "servedName": "x", "modelPath": "x", "memoryBudgetGiB": -2}',
            "memoryBudgetGiB:",
        ),
        (
            ["args", "-"],
            '{"id": "x", "servedName": "x", "modelPath": "x", "extraArgs": ["--max-num-seqs", "many"]}',
            "--max-num-seqs:",
        ),
        (["args", "-", "--total-gib", "0"], "{}", "--total-gib"),
        (["args", "--parse"], "not json", "stdin: not valid JSON"),
        (["args", "--parse"], '{"a": 1}', "JSON array of strings"),
        (["args", "--parse", "--executable", "nover"], '["llama-server"]', "--executable"),
        (["args", "--bogus"], "", "unrecognized arguments"),
        (["nope"], "", "invalid choice"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    argv: list[str],
    stdin: str,
    needle: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(monkeypatch, capsys, *argv, stdin=stdin)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1, err
    assert err.startswith("mirbad: error: ")
    assert needle in err


def test_a_misspelled_field_in_an_args_file_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    definition = json.loads((EXAMPLES / "vllm-qwen3.json").read_text())
    file = tmp_path / "typo.json"
    file.write_text(json.dumps({**definition, "maxModelLenn": 4096}))

    code, out, err = run(monkeypatch, capsys, "args", str(file))
    limit = run(monkeypatch, capsys, "args", "-", stdin=json.dumps({**definition, "maxNumSeqs": 2**48}))

    assert (code, out) == (2, "")
    assert err == "mirbad: error: maxModelLenn: unknown field; did you mean `maxModelLen`?\n"
    assert limit[0] == 2
    assert "maxNumSeqs: must be at most 65536" in limit[2]


def test_console_script_is_installed() -> None:
    script = Path(sys.executable).parent / "mirbad"
    result = subprocess.run(
        [str(script), "args", str(EXAMPLES / "llamacpp-tiny.json")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)[:2] == ["--model", "tiny/tiny-llama.gguf"]
