"""The ``mirbad`` command line: ``up`` (a fleet of one), ``demo``, ``admin reset-password`` and ``args``."""

from __future__ import annotations

import argparse
import getpass
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from mirbad_orchestration import build_args, detect_runtime, normalize_definition, parse_args
from mirbad_orchestration.backups import FleetRecovery
from mirbad_orchestration.commandline import DEFAULT_TOTAL_GIB
from mirbad_protocol import ExecutableRef, InvalidFieldError, MirbadError, ModelDefinition, RuntimeKind
from mirbad_router import run_event_loop

from ._admin_auth import AdminAuth
from ._app import UiInstaller
from ._data_dir import INITIAL_PASSWORD_FILE
from ._demo_command import add_demo, run_demo
from ._fleet_of_one import FleetOfOne
from ._fleet_recovery import read_fleet_recovery
from ._log_chatter import quiet_websocket_chatter
from ._settings import DEFAULT_ENROLL_PORT, DEFAULT_PORT, load_master_settings

__all__ = ["main"]

_RUNTIMES: tuple[RuntimeKind, ...] = ("vllm", "llamacpp", "mlx")
PASSPHRASE_ENV = "MIRBAD_BACKUP_PASSPHRASE"  # noqa: S105 (a variable's name)


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
    _add_up(commands)
    add_demo(commands, _add_data_dir)
    _add_admin(commands)
    return parser


def _add_up(commands: Any) -> None:
    up = commands.add_parser(
        "up",
        help="run a fleet of one: the master and this machine's agent, on one port",
        description="Serve the portal, /api and /v1 on one port, with this machine's agent as node "
        "'local'. Ctrl-C stops the models it runs and the agent; the next run starts them again.",
    )
    up.add_argument("--host", help="address to listen on (default 127.0.0.1; MIRBAD_HOST)")
    up.add_argument("--port", type=int, help=f"port of the portal, /api and /v1 (default {DEFAULT_PORT})")
    _add_data_dir(up)
    up.add_argument(
        "--enroll-port", type=int, help=f"enroll listener TLS port (default {DEFAULT_ENROLL_PORT})"
    )
    up.add_argument("--agent-port", type=int, help="the local agent's loopback port (default: a free one)")
    up.add_argument("--agent-config", type=Path, help="extra settings for the local agent (JSON or TOML)")
    up.add_argument("--model-root", type=Path, action="append", help="a model folder (repeatable)")
    up.add_argument("--llama-server", type=Path, help="the llama-server binary (default: found on PATH)")
    up.add_argument(
        "--metrics-key-ids",
        action="store_true",
        default=None,
        help="label /metrics' API key usage with key ids (default: summed per model; MIRBAD_METRICS_KEY_IDS)",
    )
    up.add_argument("--header-timeout-s", type=float, help="seconds a request header may take (default 10)")
    up.add_argument(
        "--body-timeout-s", type=float, help="longest pause within a request body, in seconds (default 60)"
    )
    up.add_argument(
        "--max-connections",
        type=int,
        help="open connections at most (default: the descriptor limit less room for the rest)",
    )
    up.add_argument("--handshake-timeout-s", type=float, help="seconds a TLS handshake may take (default 5)")
    up.add_argument(
        "--body-min-rate",
        type=float,
        help="bytes per second a request body must average after its first 5 s (default 1024)",
    )
    up.add_argument(
        "--max-header-bytes", type=int, help="longest request header; longer ones get 431 (default 65536)"
    )
    up.add_argument(
        "--max-api-body-bytes",
        type=int,
        help="largest request body outside /v1 (the admin API, the portal); larger ones get 413 "
        "(default 30000000)",
    )
    up.add_argument(
        "--trusted-proxy",
        action="append",
        help="a reverse proxy (address or network) whose X-Forwarded-For is believed (repeatable; "
        "default none; MIRBAD_TRUSTED_PROXIES)",
    )
    up.add_argument(
        "--recover",
        type=Path,
        metavar="BACKUP",
        help="fleet recovery: become the master a passphrase backup came from (its nodes, identity and "
        f"CA too) on a data directory without a master; the passphrase is {PASSPHRASE_ENV} or asked "
        "on a terminal (MIRBAD_RECOVER)",
    )
    up.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])


def _add_admin(commands: Any) -> None:
    admin = commands.add_parser("admin", help="the administrator's password")
    actions = admin.add_subparsers(dest="action", required=True, parser_class=_Parser)
    reset = actions.add_parser("reset-password", help="make a new administrator password and print it")
    _add_data_dir(reset)
    reset.add_argument(
        "--password-file",
        type=Path,
        help="take the password from this file (its first line; '-' reads stdin) and print nothing of it",
    )


def _add_data_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, help="the data directory (default ~/.local/share/mirbad)")


def _run_up(ns: argparse.Namespace) -> int:
    flags = {
        "host": ns.host,
        "port": ns.port,
        "data_dir": ns.data_dir,
        "enroll_port": ns.enroll_port,
        "agent_port": ns.agent_port,
        "agent_config": ns.agent_config,
        "model_roots": ns.model_root,
        "llama_server": ns.llama_server,
        "metrics_key_ids": ns.metrics_key_ids,
        "header_timeout_s": ns.header_timeout_s,
        "body_timeout_s": ns.body_timeout_s,
        "max_connections": ns.max_connections,
        "handshake_timeout_s": ns.handshake_timeout_s,
        "body_min_rate": ns.body_min_rate,
        "max_header_bytes": ns.max_header_bytes,
        "max_api_body_bytes": ns.max_api_body_bytes,
        "trusted_proxies": ns.trusted_proxy,
        "recover": ns.recover,
    }
    settings = load_master_settings(os.environ, flags)
    recovery = _open_recovery(settings.recover) if settings.recover is not None else None
    logging.basicConfig(level=ns.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # One line per agent call every few seconds would drown what matters.
    for chatty in ("httpx", "httpcore"):
        logging.getLogger(chatty).setLevel(max(logging.WARNING, logging.getLogger().level))
    quiet_websocket_chatter()
    # A password printed into a pipe ends up in a journal or a container log: only a terminal sees it.
    fleet = FleetOfOne(
        settings,
        announce=_announce,
        ui=_portal(),
        password_to_terminal=sys.stdout.isatty(),
        recovery=recovery,
    )
    try:
        run_event_loop(fleet.run)  # on uvloop when it is installed
    except (MirbadError, OSError) as exc:
        print(f"mirbad: error: {exc}", file=sys.stderr)
        return 1
    return 0


def _open_recovery(path: Path) -> FleetRecovery:
    """The backup ``--recover`` names, opened with its passphrase before anything starts."""
    passphrase = os.environ.get(PASSPHRASE_ENV)
    if not passphrase:
        if not sys.stdin.isatty():
            _fail(f"--recover: set {PASSPHRASE_ENV} to the backup's passphrase (no terminal to ask on)")
        passphrase = getpass.getpass(f"Passphrase of {path.name}: ")
    try:
        return read_fleet_recovery(path, passphrase)
    except InvalidFieldError as exc:
        _fail(f"{exc.field}: {exc.reason}" if exc.field == "--recover" else f"--recover {path}: {exc}")
    except MirbadError as exc:
        _fail(f"--recover {path}: {exc}")


def _run_admin(ns: argparse.Namespace) -> None:
    settings = load_master_settings(os.environ, {"data_dir": ns.data_dir})
    given = _given_password(ns.password_file) if ns.password_file is not None else None
    password = AdminAuth(settings.data_dir).reset_password(given)
    # The first run's password file (if any) no longer opens anything; it would only mislead.
    (settings.data_dir / INITIAL_PASSWORD_FILE).unlink(missing_ok=True)
    if given is not None:
        # A Secret's value must not end up in a container log.
        print(f"administrator password set from {ns.password_file}")
    else:
        print(f"new administrator password: {password}")
    print("(only its hash is kept; a running master ends every portal session and uses it at once)")


_MIN_PASSWORD_LENGTH = 12


def _given_password(path: Path) -> str:
    lines = _read_text(path).splitlines()
    password = lines[0] if lines else ""
    if len(password) < _MIN_PASSWORD_LENGTH:
        _fail(f"--password-file: the password must be at least {_MIN_PASSWORD_LENGTH} characters")
    return password


def _announce(message: str) -> None:
    print(message, flush=True)


def _portal() -> UiInstaller:
    """The portal's installer, imported only by ``up`` so other commands never load NiceGUI."""
    from ._pages import install_portal

    return install_portal


def _read_text(path: Path | None) -> str:
    if path is None or str(path) == "-":
        return sys.stdin.read()
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        _fail(f"{path}: {exc.strerror or exc}")


def _load_definition(path: Path | None) -> ModelDefinition:
    # A file a person wrote: an unknown (misspelled) field is refused, not silently dropped.
    return ModelDefinition.from_user_json(_read_text(path))


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
        elif ns.command == "up":
            return _run_up(ns)
        elif ns.command == "admin":
            _run_admin(ns)
        elif ns.command == "demo":
            return run_demo(ns, _given_password, _fail)
    except InvalidFieldError as exc:
        _fail(f"{exc.field}: {exc.reason}")
    except MirbadError as exc:
        _fail(str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
