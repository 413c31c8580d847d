"""The ``mirbad-agent`` command: ``serve``, ``service`` (Windows), ``enroll``, ``executables add``.

Errors a user can fix (a bad setting, a missing certificate, a taken port) are printed as one line
and exit with status 2.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mirbad_protocol import MirbadError
from mirbad_router import run_event_loop

from ._config import default_settings_file, load_settings
from ._enroll import add_enroll_arguments, run_enroll
from ._executables_cli import add_executables_arguments, run_executables
from ._request_log import quiet_polls
from ._serve import load_credentials, run_agent
from ._windows_service import dispatch_to_scm

__all__ = ["main"]

_PROGRAM = "mirbad-agent"
_USAGE_ERROR = 2


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (the process arguments by default); return the exit status."""
    parser = _parser()
    arguments = parser.parse_args(argv)
    try:
        if arguments.command == "serve":
            return _serve(arguments)
        if arguments.command == "service":
            return _service(arguments)
        if arguments.command == "executables":
            return run_executables(arguments)
        return int(run_enroll(arguments))
    except MirbadError as exc:
        print(f"{_PROGRAM}: error: {exc}", file=sys.stderr)
        return _USAGE_ERROR


def _serve(arguments: argparse.Namespace) -> int:
    settings = load_settings(_settings_file(arguments), _overrides(arguments))
    credentials = load_credentials(settings)
    logging.basicConfig(
        level=arguments.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    quiet_polls()
    run_event_loop(run_agent, settings, credentials)  # on uvloop when it is installed
    return 0


def _service(arguments: argparse.Namespace) -> int:
    # No console under the SCM: the records go to the Event Log (WARNING and above), and the
    # settings are read inside the service, so their errors land there too.
    logging.getLogger().setLevel(arguments.log_level.upper())
    quiet_polls()
    return dispatch_to_scm(lambda: load_settings(_settings_file(arguments), _overrides(arguments)))


def _settings_file(arguments: argparse.Namespace) -> Path | None:
    if arguments.config is not None:
        return Path(arguments.config)
    # The file `executables add` writes by default, when there is one.
    default = default_settings_file(arguments.state_dir)
    return default if default.is_file() else None


def _overrides(arguments: argparse.Namespace) -> dict[str, Any]:
    flags = {
        "state_dir": arguments.state_dir.absolute() if arguments.state_dir is not None else None,
        "host": arguments.host,
        "port": arguments.port,
        "node_name": arguments.node_name,
        "model_roots": [path.absolute() for path in arguments.model_root] if arguments.model_root else None,
        "memory_reserve_gib": arguments.memory_reserve_gib,
        "fake_total_gib": arguments.fake_total_gib,
        "telemetry_interval_s": arguments.telemetry_interval_s,
    }
    overrides: dict[str, Any] = {key: value for key, value in flags.items() if value is not None}
    if arguments.docker is not None:
        overrides["docker"] = {"enabled": arguments.docker}
    if arguments.process_host is not None:
        overrides["process"] = {"enabled": arguments.process_host}
    return overrides


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=_PROGRAM, description="The Mirbad node agent.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = commands.add_parser("serve", help="run the agent (mutual TLS, /agent/v1)")
    _add_agent_arguments(serve)
    service = commands.add_parser(
        "service", help="run the agent as the Windows service mirbad-agent (started by the SCM)"
    )
    _add_agent_arguments(service)
    enroll = commands.add_parser("enroll", help="obtain this node's certificate from the master")
    add_enroll_arguments(enroll)
    executables = commands.add_parser("executables", help="the catalogue of binaries the agent may launch")
    add_executables_arguments(executables)
    return parser


def _add_agent_arguments(serve: argparse.ArgumentParser) -> None:
    serve.add_argument(
        "--config",
        type=Path,
        help="settings file (.toml, else JSON; default STATE_DIR/agent.toml if present)",
    )
    serve.add_argument("--state-dir", type=Path, help="credentials, process records, logs and keys")
    serve.add_argument("--host", help="address to listen on (default 0.0.0.0)")
    serve.add_argument("--port", type=int, help="port to listen on (default 9443)")
    serve.add_argument("--node-name", help="the name reported to the master (default: the host name)")
    serve.add_argument("--model-root", type=Path, action="append", help="a model root (repeatable)")
    serve.add_argument("--docker", action=argparse.BooleanOptionalAction, help="compose the container driver")
    serve.add_argument(
        "--process-host", action=argparse.BooleanOptionalAction, help="compose the process driver"
    )
    serve.add_argument("--memory-reserve-gib", type=float, help="memory admission keeps free")
    serve.add_argument("--fake-total-gib", type=float, help="memory reported where there is no meminfo")
    serve.add_argument("--telemetry-interval-s", type=float, help="seconds between metrics scrapes")
    serve.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"], help="default info"
    )
