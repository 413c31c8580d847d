"""A client that leaves mid-generation stops the generation, across both hops, seen by llama-server itself.

``mirbad up`` serves the tiny GGUF on a real llama-server; a chat goes client → master's router → the
agent's proxy (mutual TLS) → llama-server. The model runs with ``--context-shift`` and the request asks
for millions of tokens, so the generation would go on for many minutes on its own (the streamed case
reads well past the 256-token context to show it). When the client closes its connection, each hop has
to close the next one. For a streamed chat, llama-server's own ``/metrics`` must then report no request
in progress and its ``/slots`` no busy slot within a bound. For a non-streamed one (no answer yet, only
the relays' watch for the client leaving) llama-server itself cannot tell: it checks its connection
only after a second without a new token, so while tokens flow it generates on (seen with this build);
the test then checks what the hops own, that llama-server's connection was closed from the agent's side.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from tests._support.mirbad_up import WAIT_S, Up, mirbad_up, port_block
from tests._support.polling import until
from tests._support.real_parts import llama_server_path
from tests._support.tiny_definition import tiny_llama_definition

from mirbad_client import MirbadClient
from mirbad_protocol import ModelDefinition
from mirbad_protocol.agent import ProcessRuntimeInfo
from mirbad_runtime import parse_metrics

pytestmark = [
    pytest.mark.llamacpp,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the model's key through /proc"),
    pytest.mark.timeout(240),
]

STOP_BOUND_S = 10.0
"""How soon after the client leaves llama-server must have stopped generating."""
LEAVE_S = 5.0
"""How long the non-streamed client waits for its answer before it leaves."""
ENDLESS = 10_000_000
"""``max_tokens`` for a generation that context shifting lets run for many minutes."""
# ``ignore_eos``: the tiny model samples at random and would now and then pick its end-of-text token
# after a few hundred tokens, ending the generation before the test leaves it.
CHAT = {
    "model": "tiny-chat",
    "messages": [{"role": "user", "content": "hello"}],
    "max_tokens": ENDLESS,
    "ignore_eos": True,
}
ATTEMPTS = 5
BEYOND_CONTEXT = 500
"""Streamed chunks read before leaving: twice the context (context shifting carries it on), and well
short of four times it, where this llama-server ends a generation whose ``max_tokens`` is larger."""


_CLOSE_WAIT = "08"
"""The TCP state of a socket whose peer has closed, in ``/proc/net/tcp``'s numbering."""


class LlamaServer:
    """The model's llama-server, asked directly with its instance key (read from its environment)."""

    def __init__(self, data_dir: Path, model_id: str) -> None:
        records = json.loads((data_dir / "agent" / "processes.json").read_text())["processes"]
        [record] = [record for record in records if record["modelId"] == model_id]
        environ = Path(f"/proc/{record['pid']}/environ").read_bytes().split(b"\0")
        [key] = [entry.split(b"=", 1)[1].decode() for entry in environ if entry.startswith(b"LLAMA_API_KEY=")]
        self.pid, self.port = int(record["pid"]), int(record["port"])
        self.http = httpx.Client(
            base_url=f"http://127.0.0.1:{record['port']}",
            headers={"Authorization": f"Bearer {key}"},
            timeout=WAIT_S,
            trust_env=False,
        )

    def processing(self) -> float:
        """``llamacpp:requests_processing``: the requests llama-server is working on now."""
        text = self.http.get("/metrics").raise_for_status().text
        return parse_metrics(text, model_id="tiny", at=datetime.now(UTC)).requests_running

    def busy_slots(self) -> int:
        """The slots ``/slots`` reports as processing."""
        return sum(1 for slot in self.http.get("/slots").raise_for_status().json() if slot["is_processing"])

    def half_closed(self) -> int:
        """llama-server's connections whose peer has closed its end while llama-server still holds its own.

        llama-server checks for a client that left only when no token came for a second, so a
        non-streamed generation goes on after its connection is gone; the closed peer is what shows that
        the hops in front of it let go.
        """
        pid = self.pid
        inodes = {
            link.readlink().name[len("socket:[") : -1]
            for link in Path(f"/proc/{pid}/fd").iterdir()
            if link.readlink().name.startswith("socket:[")
        }
        count = 0
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            for row in Path(table).read_text().splitlines()[1:]:
                fields = row.split()
                local_port = int(fields[1].rsplit(":", 1)[1], 16)
                if local_port == self.port and fields[3] == _CLOSE_WAIT and fields[9] in inodes:
                    count += 1
        return count

    def idle(self) -> bool:
        return self.processing() == 0 and self.busy_slots() == 0


@pytest.fixture
def up(tmp_path: Path) -> Iterator[Up]:
    server = llama_server_path()
    assert server is not None
    first = port_block()
    process = {"port_range_start": first, "port_range_end": first + 19, "stop_timeout_s": 5}
    config = {"graceful_shutdown_s": 2, "process": process, "docker": {"enabled": False}}
    with mirbad_up(tmp_path, config, llama_server=server) as started:
        yield started


@pytest.fixture
def llama(up: Up) -> Iterator[LlamaServer]:
    password = up.first_run_password(up.start())
    with MirbadClient(up.base_url, password, timeout=WAIT_S) as admin:
        [node] = admin.nodes()
        assert node.info is not None
        [llamacpp] = [r for r in node.info.runtimes if isinstance(r, ProcessRuntimeInfo)]
        [executable] = llamacpp.executables
        extra = ["--threads", "1", "--context-shift"]
        wire = tiny_llama_definition(executable.model_dump(mode="json", by_alias=True), extraArgs=extra)
        admin.create_model(ModelDefinition.from_wire(wire))
        admin.start("tiny")
        admin.wait_ready("tiny", timeout=WAIT_S)
    server = LlamaServer(up.data_dir, "tiny")
    yield server
    server.http.close()


def test_a_streamed_chat_whose_client_leaves_stops_generating(up: Up, llama: LlamaServer) -> None:
    # The tiny model now and then ends a generation by itself (its sampling is random), so a chat that
    # was no longer generating when the client left proves nothing: it is asked again, a few times.
    for _attempt in range(ATTEMPTS):
        with (
            httpx.Client(base_url=up.base_url, timeout=WAIT_S, trust_env=False) as client,
            client.stream("POST", "/v1/chat/completions", json=CHAT | {"stream": True}) as response,
        ):
            assert response.status_code == 200
            events = 0
            for line in response.iter_lines():
                events += line.startswith("data: ")
                if events == BEYOND_CONTEXT:
                    break
            generating = events == BEYOND_CONTEXT and (llama.processing() == 1 or llama.busy_slots() == 1)
        # Leaving the block closed the connection mid-stream.
        if generating:
            break
        until(llama.idle, "llama-server did not end its own generation", timeout_s=STOP_BOUND_S)
    else:
        pytest.fail(f"no chat was still generating after {BEYOND_CONTEXT} chunks in {ATTEMPTS} tries")
    until(llama.idle, "llama-server still generating after its client left", timeout_s=STOP_BOUND_S)


def test_a_waiting_chat_whose_client_leaves_closes_the_model_servers_connection(
    up: Up, llama: LlamaServer
) -> None:
    # A non-streamed answer sends nothing until it is done: the client gives up waiting after LEAVE_S.
    timeout = httpx.Timeout(WAIT_S, read=LEAVE_S)
    outcome: list[BaseException] = []

    def ask() -> None:
        with httpx.Client(base_url=up.base_url, timeout=timeout, trust_env=False) as client:
            try:
                client.post("/v1/chat/completions", json=CHAT)
            except httpx.ReadTimeout as exc:
                outcome.append(exc)

    asking = threading.Thread(target=ask)
    asking.start()
    try:
        until(lambda: llama.processing() == 1, "the chat never reached llama-server", timeout_s=LEAVE_S)
        # The agent's own scrapes may leave one for an instant; the chat's must come on top of those.
        before = llama.half_closed()
    finally:
        asking.join(WAIT_S)
    assert len(outcome) == 1, "the generation ended by itself"
    # Both hops let go: the agent closed its connection to llama-server, which sees its peer gone.
    until(
        lambda: llama.half_closed() > before,
        "the agent kept its connection to llama-server after the client left",
        timeout_s=STOP_BOUND_S,
    )
