"""A real agent app that reports another version, enrolled and served over mutual TLS in its own process.

The Releases page warns about an agent whose major.minor differs from the master's; a fleet made by
one checkout has one version, so this stand-in reports the version it is given. Everything else is
the real thing: ``enroll_node`` with a join token against the master's enroll listener, the real
agent app (no runtimes) and its mutual-TLS server.

Usage: ``python -m tests._support.older_agent ENROLL_URL TOKEN NODE_NAME STATE_DIR PORT VERSION``;
it serves until SIGTERM.
"""

from __future__ import annotations

import ipaddress
import socket
import sys
from pathlib import Path

import anyio

from mirbad_agent import AgentServices, AgentSettings, NodeRuntimes, create_app, enroll_node, serve
from mirbad_runtime import MemoryProbe


async def main(enroll_url: str, token: str, name: str, state_dir: Path, port: int, version: str) -> None:
    """Enroll as ``name``, then serve the agent app reporting ``version`` on ``127.0.0.1:port``."""
    loopback = [ipaddress.ip_address("127.0.0.1")]
    credentials = await enroll_node(enroll_url, token, state_dir, node_name=name, ip_addresses=loopback)
    settings = AgentSettings(node_name=name, state_dir=state_dir, host="127.0.0.1", port=port)
    services = AgentServices(
        runtimes=NodeRuntimes([]),
        memory=MemoryProbe(linux=False, fake_total_gib=8.0),
        node_name=name,
        version=version,
    )
    with socket.create_server(("127.0.0.1", port)) as listener:
        async with services:
            await serve(create_app(services), settings, credentials, listener)


if __name__ == "__main__":
    url, token, name, state, port, version = sys.argv[1:7]
    anyio.run(main, url, token, name, Path(state), int(port), version)
