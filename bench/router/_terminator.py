"""A local TLS terminator: plain TCP in, mutual TLS with the master's certificate out, bytes relayed.

wrk has no option for a client certificate, and the agent serves only mutual TLS; this process stands
between them, as stunnel would (not installed here). It runs as its own process so that its CPU is
measured apart from the agent's and reported as the cost of the harness, not of Mirbad. One upstream
TLS connection per accepted connection, kept for as long as the client keeps its own.

``python -m bench.router._terminator --pki DIR --target-port P`` prints ``port N`` once listening.
"""

from __future__ import annotations

import argparse
import importlib.util
import ssl
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import anyio
from anyio.abc import ByteStream, SocketStream

from mirbad_protocol.pki import TlsCredentials

__all__ = ["main"]

_HOST: Final = "127.0.0.1"
_CHUNK: Final = 65536
_CONNECT_TIMEOUT_S: Final = 10.0


async def _pipe(source: ByteStream, sink: ByteStream) -> None:
    try:
        while True:
            await sink.send(await source.receive(_CHUNK))
    except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        return


def _handler(target_port: int, context: ssl.SSLContext) -> Any:
    async def handle(client: SocketStream) -> None:
        async with client:
            try:
                with anyio.fail_after(_CONNECT_TIMEOUT_S):
                    upstream = await anyio.connect_tcp(
                        _HOST, target_port, ssl_context=context, tls_standard_compatible=False
                    )
            except (OSError, TimeoutError, ssl.SSLError):
                return
            async with upstream, anyio.create_task_group() as group:

                async def outbound() -> None:
                    await _pipe(client, upstream)
                    group.cancel_scope.cancel()

                group.start_soon(outbound)
                await _pipe(upstream, client)
                group.cancel_scope.cancel()

    return handle


async def _serve(target_port: int, context: ssl.SSLContext) -> None:
    listener = await anyio.create_tcp_listener(local_host=_HOST, local_port=0, backlog=1024)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    print(f"port {port}", flush=True)
    await listener.serve(_handler(target_port, context))


def main(argv: Sequence[str] | None = None) -> None:
    """Relay until killed."""
    parser = argparse.ArgumentParser(prog="bench-terminator")
    parser.add_argument("--pki", type=Path, required=True, help="the master's PKI folder")
    parser.add_argument("--target-port", type=int, required=True)
    options = parser.parse_args(argv)
    context = TlsCredentials.load(options.pki, "master").client_context()
    backend: dict[str, Any] = {}
    if importlib.util.find_spec("uvloop") is not None:
        backend = {"backend_options": {"use_uvloop": True}}
    anyio.run(_serve, options.target_port, context, **backend)


if __name__ == "__main__":
    main(sys.argv[1:])
