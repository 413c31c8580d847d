"""The ``mirbad-hostd`` command: serve hostd on its unix socket.

A problem the operator can fix (an insecure deny list or whitelist, a malformed file, a missing
group) is printed as one line and exits with status 2, so systemd shows why hostd refused to start.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from mirbad_protocol import MirbadError

from ._serve import run_hostd
from ._settings import load_settings

__all__ = ["main"]

_PROGRAM = "mirbad-hostd"
_USAGE_ERROR = 2


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (the process arguments by default); return the exit status."""
    arguments = _parser().parse_args(argv)
    logging.basicConfig(level=arguments.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    try:
        settings = load_settings(arguments.config, _overrides(arguments))
        anyio.run(run_hostd, settings)
    except MirbadError as exc:
        print(f"{_PROGRAM}: error: {exc}", file=sys.stderr)
        return _USAGE_ERROR
    return 0


def _overrides(arguments: argparse.Namespace) -> dict[str, Any]:
    flags = {
        "socket_path": arguments.socket,
        "socket_group": arguments.socket_group,
        "state_dir": arguments.state_dir,
        "config_file": arguments.seed,
        "deny_file": arguments.deny_file,
    }
    return {key: value for key, value in flags.items() if value is not None}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=_PROGRAM, description="The Mirbad host daemon (Services page).")
    parser.add_argument("--config", type=Path, help="settings file (JSON); every path is a setting")
    parser.add_argument("--socket", type=Path, help="the unix socket (default /run/mirbad-hostd/hostd.sock)")
    parser.add_argument("--socket-group", help="the group that may connect (default docker)")
    parser.add_argument("--state-dir", type=Path, help="the whitelist's folder (default $STATE_DIRECTORY)")
    parser.add_argument("--seed", type=Path, help="the seed file (default /etc/mirbad/hostd.json)")
    parser.add_argument(
        "--deny-file", type=Path, help="extra deny patterns (default /etc/mirbad/hostd-deny.json)"
    )
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return parser
