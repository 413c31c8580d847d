#!/opt/mirbad/bin/python3
"""Leave a one-time join token for the compose project's agent until its node is registered.

Run by the master image's entrypoint beside ``mirbad up``, with the administrator password on stdin:
it waits for ``/healthz``, then, while the master has no node ``--node``, issues a join token for it
(registered at ``--agent-url`` when redeemed) and writes it to ``--token-file`` (owner-only, atomic),
renewing it before it expires. Once the node is registered the file is removed and the script exits.
The agent's container reads the file from the shared volume and enrolls with it. Only the admin API
is used, as a person would in the portal.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

_TOKEN_TTL_S = 3600
_RENEW_BEFORE = timedelta(minutes=5)
_POLL_S = 2.0
_HEALTH_WAIT_S = 600.0
_TIMEOUT_S = 30.0
_EVERYWHERE = ("", "0.0.0.0", "::")  # noqa: S104 - the addresses that mean "listen on all"


def main() -> int:
    """Issue and renew the token until the node is registered; 0 then, 1 when the master never answers."""
    options = _options()
    password = sys.stdin.readline().strip()
    host = os.environ.get("MIRBAD_HOST", "0.0.0.0")  # noqa: S104
    dial = "127.0.0.1" if host in _EVERYWHERE else host
    base_url = f"http://{dial}:{os.environ.get('MIRBAD_PORT', '8080')}"
    headers = {"Authorization": f"Bearer {password}"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=_TIMEOUT_S, trust_env=False) as api:
        if not _wait_healthy(api):
            _say(f"the master at {base_url} did not answer /healthz within {_HEALTH_WAIT_S:g} s")
            return 1
        expires: datetime | None = None
        while True:
            try:
                if _registered(api, options.node):
                    options.token_file.unlink(missing_ok=True)
                    _say(f"node {options.node} is registered; its join token is removed")
                    return 0
                if expires is None or datetime.now(UTC) >= expires - _RENEW_BEFORE:
                    expires = _issue(api, options)
            except (httpx.HTTPError, OSError) as exc:
                _say(f"will retry: {exc}")
            time.sleep(_POLL_S)


def _options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mirbad-compose-join", description=__doc__)
    parser.add_argument("--node", required=True, help="the node name the agent joins as")
    parser.add_argument("--agent-url", required=True, help="where its agent answers (https://host:port)")
    parser.add_argument("--token-file", required=True, type=Path, help="where the token is left")
    return parser.parse_args()


def _wait_healthy(api: httpx.Client) -> bool:
    deadline = time.monotonic() + _HEALTH_WAIT_S
    while time.monotonic() < deadline:
        try:
            if api.get("/healthz").status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(_POLL_S)
    return False


def _registered(api: httpx.Client, node: str) -> bool:
    response = api.get("/api/nodes")
    response.raise_for_status()
    wanted = node.casefold()
    return any(wanted in (entry["id"].casefold(), entry["name"].casefold()) for entry in response.json())


def _issue(api: httpx.Client, options: argparse.Namespace) -> datetime:
    body = {"nodeName": options.node, "agentUrl": options.agent_url, "ttlSeconds": _TOKEN_TTL_S}
    response = api.post("/api/nodes/enrollment-tokens", json=body)
    if response.is_error:
        raise httpx.HTTPStatusError(
            f"the master refused a join token ({response.status_code}): {response.text}",
            request=response.request,
            response=response,
        )
    issued = response.json()
    _write_private(options.token_file, issued["token"] + "\n")
    _say(f"a join token for node {options.node} is in {options.token_file} until {issued['expiresAt']}")
    return datetime.fromisoformat(issued["expiresAt"])


def _write_private(path: Path, text: str) -> None:
    scratch = path.with_name(f".{path.name}.tmp")
    descriptor = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(scratch, path)


def _say(message: str) -> None:
    print(f"mirbad-compose-join: {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
