#!/opt/mirbad/bin/python3
"""The images' HEALTHCHECK: ``master`` asks ``/healthz``; ``agent`` connects to its port.

The agent speaks mutual TLS only, so a probe without the master's certificate can check no more than
that the port accepts. Settings are the containers' own ``MIRBAD_*`` variables; exit 0 is healthy.
"""

from __future__ import annotations

import os
import socket
import sys
import urllib.request

_TIMEOUT_S = 4.0
_EVERYWHERE = ("", "0.0.0.0", "::")  # noqa: S104 - the addresses that mean "listen on all"


def _dial(host: str) -> str:
    return "127.0.0.1" if host in _EVERYWHERE else host


def master() -> int:
    """0 when the master's ``/healthz`` answers 200."""
    host = _dial(os.environ.get("MIRBAD_HOST", "0.0.0.0"))  # noqa: S104
    url = f"http://{host}:{os.environ.get('MIRBAD_PORT', '8080')}/healthz"
    with urllib.request.urlopen(url, timeout=_TIMEOUT_S) as response:
        return 0 if response.status == 200 else 1


def agent() -> int:
    """0 when the agent's port accepts a connection."""
    port = int(os.environ.get("MIRBAD_AGENT_PORT", "9443"))
    with socket.create_connection(("127.0.0.1", port), timeout=_TIMEOUT_S):
        return 0


if __name__ == "__main__":
    checks = {"master": master, "agent": agent}
    if len(sys.argv) != 2 or sys.argv[1] not in checks:
        print("usage: mirbad-healthcheck master|agent", file=sys.stderr)
        sys.exit(2)
    try:
        sys.exit(checks[sys.argv[1]]())
    except OSError as exc:
        print(f"unhealthy: {exc}", file=sys.stderr)
        sys.exit(1)
