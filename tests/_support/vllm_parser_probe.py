"""Parse command lines with the pinned vLLM's own ``vllm serve`` parser; run with the vLLM venv's python.

Reads one ``{"argvs": [[...], ...]}`` per line on stdin and writes one ``{"flags": {...}, "results":
[...]}`` line for each on stdout (vLLM is imported once, so a test session keeps one probe running):
``flags`` maps every option string of the serve parser to its destination and choices; each result is
``{"ok": true, "settings": {dest: value}}`` or ``{"ok": false, "error": "vLLM's own message"}``. The
parser is built exactly as ``vllm serve`` builds it (``FlexibleArgumentParser`` with the serve
subcommand's ``make_arg_parser``), and each argv is parsed as ``vllm serve ARGV``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import io
import json
import sys
from typing import Any

_DRAWN_FIELDS = frozenset({"engine_id"})
"""Config fields vLLM fills with a fresh random value on every parse (the KV transfer engine id)."""


def serve_parser() -> Any:
    """The top-level ``vllm`` parser with the ``serve`` subcommand, as ``vllm.entrypoints.cli.main``."""
    from vllm.entrypoints.cli.serve import ServeSubcommand  # type: ignore[import-not-found,unused-ignore]
    from vllm.utils.argparse_utils import FlexibleArgumentParser  # type: ignore[import-not-found,unused-ignore]

    top = FlexibleArgumentParser(prog="vllm")
    subparsers = top.add_subparsers(required=False, dest="subparser")
    ServeSubcommand().subparser_init(subparsers)
    return top


def flag_table(top: Any) -> dict[str, dict[str, Any]]:
    """Every option string of the serve parser: its destination, choices and whether it takes a value."""
    serve = top._subparsers._group_actions[0].choices["serve"]
    table: dict[str, dict[str, Any]] = {}
    for action in serve._actions:
        for option in action.option_strings:
            choices = sorted(map(str, action.choices)) if action.choices is not None else None
            table[option] = {"dest": action.dest, "choices": choices, "takesValue": action.nargs != 0}
    return table


def jsonable(value: Any) -> Any:
    """A JSON form of a parsed value: config dataclasses by field, enums by name, the rest by repr."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, list | tuple | set):
        return [jsonable(item) for item in value]
    if isinstance(value, dict):
        return {str(key): jsonable(item) for key, item in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = [field.name for field in dataclasses.fields(value) if field.name not in _DRAWN_FIELDS]
        return {name: jsonable(getattr(value, name)) for name in fields}
    return repr(value)


def parse(top: Any, argv: list[str]) -> dict[str, Any]:
    """Parse ``vllm serve ARGV``: the settings it yields, or vLLM's own refusal."""
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            namespace = top.parse_args(["serve", *argv])
    except SystemExit:
        # argparse's one line, or a pydantic validation error of a config (several lines).
        return {"ok": False, "error": errors.getvalue().strip().splitlines()[-8:]}
    except Exception as exc:  # vLLM raises ValueError itself for some layouts
        return {"ok": False, "error": [f"{type(exc).__name__}: {exc}"]}
    settings = {key: jsonable(value) for key, value in vars(namespace).items() if key != "dispatch_function"}
    return {"ok": True, "settings": settings}


def main() -> None:
    """Answer each request line on stdin with one answer line on stdout, until stdin ends."""
    top = serve_parser()
    flags = flag_table(top)
    for line in sys.stdin:
        request = json.loads(line)
        answer = {"flags": flags, "results": [parse(top, argv) for argv in request["argvs"]]}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
