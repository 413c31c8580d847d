"""The ``mirbad`` command line."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from mirbad_orchestration import (
    DEFAULT_TOTAL_GIB,
    build_args,
    detect_runtime,
    normalize_definition,
    parse_args,
)
from mirbad_protocol import ExecutableRef, InvalidFieldError, MirbadError, ModelDefinition, RuntimeKind

__all__ = ["main"]

_RUNTIMES: tuple[RuntimeKind, ...] = ("vllm", "llamacpp", "mlx")


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors are one line and exit 2 like every other bad input."""

    def error(self, message: str) -> NoReturn:
        _fail(message)


def _fail(message: str) -> NoReturn:
    print(f"mirbad: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="mirbad", description="Run every local LLM behind one OpenAI-compatible endpoint.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    args = commands.add_parser(
        "args",
        help="print the command line a model definition launches, normalize it, or parse one back",
        description="FILE is a model definition (JSON, the registry's wire format). Without a mode the "
        "argv it launches is printed as one JSON array.",
    )
    mode = args.add_mutually_exclusive_group()
    mode.add_argument("--normalize", action="store_true", help="print the normalized definition as JSON")
    mode.add_argument(
        "--parse", action="store_true", help="read an argv (JSON array) on stdin, print its definition"
    )
    args.add_argument("file", nargs="?", type=Path, help="the model definition (JSON); '-' reads stdin")
    args.add_argument(
        "--total-gib",
        type=float,
        default=DEFAULT_TOTAL_GIB,
        help=f"memory of the node in GiB, for vLLM's utilization (default {DEFAULT_TOTAL_GIB:g})",
    )
    args.add_argument(
        "--runtime", choices=_RUNTIMES, help="with --parse: the runtime (default: from argv[0])"
    )
    args.add_argument("--id", dest="model_id", default=None, help="with --parse: the model id to give it")
    args.add_argument("--image", default=None, help="with --parse: the container image (vLLM)")
    args.add_argument(
        "--executable",
        default=None,
        metavar="NAME@VERSION",
        help="with --parse: the logical executable (llama.cpp, MLX)",
    )
    return parser


def _read_text(path: Path | None) -> str:
    if path is None or str(path) == "-":
        return sys.stdin.read()
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        _fail(f"{path}: {exc.strerror or exc}")


def _load_definition(path: Path | None) -> ModelDefinition:
    return ModelDefinition.from_wire_json(_read_text(path))


def _read_argv() -> list[str]:
    try:
        argv = json.loads(sys.stdin.read())
    except json.JSONDecodeError as exc:
        _fail(f"stdin: not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})")
    if not isinstance(argv, list) or not all(isinstance(item, str) for item in argv):
        _fail("stdin: expected a JSON array of strings (an argv)")
    return argv


def _executable(text: str | None) -> ExecutableRef | None:
    if text is None:
        return None
    name, sep, version = text.partition("@")
    if not sep:
        _fail(f"--executable: expected NAME@VERSION, got {text!r}")
    return ExecutableRef.from_wire({"name": name, "version": version})


def _run_args(ns: argparse.Namespace) -> None:
    if ns.total_gib <= 0:
        _fail("--total-gib: must be greater than 0")
    if ns.parse:
        if ns.file is not None:
            _fail("--parse reads the argv on stdin and takes no FILE")
        argv = _read_argv()
        runtime: RuntimeKind = ns.runtime or detect_runtime(argv)
        definition = parse_args(
            argv,
            runtime=runtime,
            model_id=ns.model_id,
            image=ns.image,
            executable=_executable(ns.executable),
            total_gib=ns.total_gib,
        )
        _print_json(definition.to_wire())
        return
    if ns.file is None:
        _fail("the following arguments are required: FILE")
    definition = _load_definition(ns.file)
    if ns.normalize:
        _print_json(normalize_definition(definition).to_wire())
    else:
        _print_json(build_args(definition, total_gib=ns.total_gib))


def _print_json(value: object) -> None:
    json.dump(value, sys.stdout, indent=2 if isinstance(value, dict) else None, ensure_ascii=False)
    sys.stdout.write("\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``mirbad`` command line; returns the exit status (2 for any bad input)."""
    ns = _parser().parse_args(argv)
    try:
        if ns.command == "args":
            _run_args(ns)
    except InvalidFieldError as exc:
        _fail(f"{exc.field}: {exc.reason}")
    except MirbadError as exc:
        _fail(str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
