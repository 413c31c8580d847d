"""A real enroll listener on a loopback TLS port, with a token store whose clock the test moves."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from starlette.types import ASGIApp, Receive, Scope, Send
from tests._support.asgi_server import serve_asgi

from mirbad_master._enroll_listener import (
    create_enroll_app,
    enroll_server_context,
    issue_enroll_server_credentials,
)
from mirbad_orchestration.fleet import ENROLLMENT_TOKENS_FILE, EnrollmentTokens, NodeRegistry
from mirbad_orchestration.testing import FakeClock
from mirbad_protocol.pki import CertificateAuthority, TlsCredentials


@dataclass
class Recorder:
    """Wraps an app and records each request's method and path, to prove what reached the master."""

    app: ASGIApp
    seen: list[tuple[str, str]] = field(default_factory=list)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.seen.append((scope["method"], scope["path"]))
        await self.app(scope, receive, send)


@dataclass
class EnrollMaster:
    """What a test needs of the running listener."""

    url: str
    ca: CertificateAuthority
    tokens: EnrollmentTokens
    clock: FakeClock
    server: TlsCredentials
    recorder: Recorder


@asynccontextmanager
async def enroll_master(
    data_dir: Path,
    *,
    names: Sequence[str] = ("127.0.0.1",),
    ca: CertificateAuthority | None = None,
    nodes: NodeRegistry | None = None,
    server: TlsCredentials | None = None,
) -> AsyncIterator[EnrollMaster]:
    """Serve the enroll listener over TLS on 127.0.0.1 with a server certificate for ``names``.

    With ``nodes``, enrollment checks names against that registry and registers enrolled nodes there.
    With ``server``, the listener serves that identity instead (an impostor's, from the same CA).
    """
    authority = ca or CertificateAuthority.create("Enroll test CA")
    clock = FakeClock(datetime.now(UTC))  # certificates are checked against the real time
    tokens = EnrollmentTokens(data_dir / ENROLLMENT_TOKENS_FILE, authority, clock=clock, nodes=nodes)
    server = server or issue_enroll_server_credentials(authority, names)
    recorder = Recorder(create_enroll_app(tokens, authority.certificate))
    async with serve_asgi(recorder, ssl_context=enroll_server_context(server)) as url:
        yield EnrollMaster(url, authority, tokens, clock, server, recorder)
