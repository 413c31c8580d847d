"""``mirbad-agent enroll``: join a fleet with a join token and keep the certificate the master issues.

The work happens in :func:`~mirbad_agent._enroll_client.enroll_node` (pin check first, then the
enrollment over a connection that trusts the pinned CA alone); this module is its command line. The agent
server loads what it writes with ``TlsCredentials.load(state_dir, AGENT_TLS_STEM)``: ``agent.key``
(0600), ``agent.crt`` and ``agent-ca.crt`` in the state folder.
"""

from __future__ import annotations

import argparse
import functools
import ipaddress
import socket
import sys
from pathlib import Path

import anyio

from mirbad_protocol.pki import IpAddress, TlsCredentials, certificate_identity, spki_pin

from ._config import default_state_dir
from ._enroll_client import AGENT_TLS_STEM, EnrollFailedError, enroll_node

__all__ = ["add_enroll_arguments", "run_enroll"]


def add_enroll_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``enroll`` options: ``--master``, ``--token``, ``--state-dir``, ``--name``, ``--san``."""
    parser.add_argument("--master", required=True, help="the master's enroll URL, https://HOST:PORT")
    parser.add_argument("--token", required=True, help="the join token the master printed (mbj1....)")
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=default_state_dir(),
        help="the agent's state folder, as its state_dir setting names it (default: %(default)s)",
    )
    parser.add_argument(
        "--name", default=socket.gethostname(), help="the node name to ask for (default: this host's name)"
    )
    parser.add_argument(
        "--san",
        action="append",
        default=[],
        type=_san,
        metavar="NAME_OR_IP",
        help="a DNS name or IP address the master will use to reach this agent (repeat for several)",
    )


def run_enroll(namespace: argparse.Namespace) -> int:
    """Enroll with the options of :func:`add_enroll_arguments`; print the outcome, return the exit status.

    Returns:
        0 on success; 2 (``EXIT_REFUSED``) when the token or the URL cannot work, with the master's
        message when it refused; 1 (``EXIT_FAILED``) for anything else. Errors are one line on stderr.
    """
    names: list[str | IpAddress] = namespace.san
    state_dir: Path = namespace.state_dir
    enroll = functools.partial(
        enroll_node,
        namespace.master,
        namespace.token,
        state_dir,
        node_name=namespace.name,
        dns_names=[name for name in names if isinstance(name, str)],
        ip_addresses=[name for name in names if not isinstance(name, str)],
    )
    try:
        credentials = anyio.run(enroll)
    except EnrollFailedError as exc:
        print(f"mirbad-agent enroll: {exc}", file=sys.stderr)
        return exc.exit_code
    _report(credentials, state_dir, namespace.master)
    return 0


def _san(text: str) -> str | IpAddress:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return text.lower()


def _report(credentials: TlsCredentials, state_dir: Path, master_url: str) -> None:
    name = certificate_identity(credentials.certificate).common_name
    ca_pin = spki_pin(credentials.ca_certificates[0])
    print(f"enrolled as node {name} with the master at {master_url}")
    print(f"  key:         {state_dir / (AGENT_TLS_STEM + '.key')} (mode 0600)")
    print(f"  certificate: {state_dir / (AGENT_TLS_STEM + '.crt')}")
    print(f"  fleet CA:    {state_dir / (AGENT_TLS_STEM + '-ca.crt')} (pin-sha256 {ca_pin})")
