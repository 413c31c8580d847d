"""Side experiment (issue 16): one HTTP/2 connection against kept-alive HTTP/1.1 for the master→agent hop.

Not part of ``python -m bench.router`` and not run by any test: the workspace has no ``h2`` and uvicorn
serves no HTTP/2, so it runs in a throwaway virtualenv of its own::

    python3 -m venv /tmp/h2venv && /tmp/h2venv/bin/pip install h2 hypercorn httpx uvicorn uvloop
    /tmp/h2venv/bin/python bench/h2_hop.py

It measures only the hop: a TLS server standing for the agent answers the bench's fixed ~300-byte chat
completion, and an httpx client standing for the master sends it small POSTs from 1 and 64 concurrent
tasks. The servers are hypercorn over HTTP/2 (ALPN h2), hypercorn over HTTP/1.1 (the same server, so
only the protocol differs) and uvicorn over HTTP/1.1 (what the agent runs today). For each it prints
requests/s and the CPU per request of the client process and of the server process (from /proc).
Nothing else of Mirbad runs, so the figures are the hop's floor, not the router's.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import anyio

_BODY = json.dumps({"model": "bench", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8})
_ANSWER = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 0,
        "model": "bench",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
).encode()

_APP = f"""
ANSWER = {_ANSWER!r}

async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(ANSWER)).encode())]
    await send({{"type": "http.response.start", "status": 200, "headers": headers}})
    await send({{"type": "http.response.body", "body": ANSWER}})
"""


def _cpu_s(pid: int) -> float:
    """CPU seconds of ``pid`` and its children (hypercorn serves from a worker process)."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if stat.parent.name == str(pid) or fields[1] == str(pid):
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_port(port: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}")


def _server(kind: str, folder: Path, port: int) -> subprocess.Popen[bytes]:
    cert, key = folder / "cert.pem", folder / "key.pem"
    bind = f"127.0.0.1:{port}"
    if kind == "uvicorn h1":
        command = [sys.executable, "-m", "uvicorn", "app:app", "--host", "127.0.0.1", "--port", str(port)]
        command += ["--ssl-certfile", str(cert), "--ssl-keyfile", str(key), "--loop", "uvloop"]
        command += ["--http", "httptools", "--log-level", "error", "--no-access-log"]
    else:
        alpn = "h2" if kind == "hypercorn h2" else "http/1.1"
        config = folder / f"hypercorn-{alpn.replace('/', '')}.toml"
        config.write_text(
            f'alpn_protocols = ["{alpn}"]\naccesslog = ""\nerrorlog = "-"\nloglevel = "ERROR"\n'
        )
        command = [sys.executable, "-m", "hypercorn", "app:app", "--bind", bind, "--certfile", str(cert)]
        command += ["--keyfile", str(key), "--worker-class", "uvloop", "--config", str(config)]
    process = subprocess.Popen(command, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_port(port)
    return process


async def _load(url: str, http2: bool, concurrency: int, seconds: float, cafile: Path) -> int:
    import httpx

    context = ssl.create_default_context(cafile=str(cafile))
    limits = httpx.Limits(max_connections=None if not http2 else 1, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(http2=http2, verify=context, limits=limits, timeout=30) as client:
        for _ in range(20):  # warm-up: connections opened, TLS done
            (await client.post(url, content=_BODY)).raise_for_status()
        done = 0
        stop = time.monotonic() + seconds

        async def one() -> None:
            nonlocal done
            while time.monotonic() < stop:
                response = await client.post(url, content=_BODY, headers={"content-type": "application/json"})
                response.raise_for_status()
                done += 1

        with anyio.fail_after(seconds + 60):
            async with anyio.create_task_group() as group:
                for _ in range(concurrency):
                    group.start_soon(one)
        return done


def main() -> None:
    """Measure every server at c=1 and c=64 and print one table."""
    seconds = float(os.environ.get("H2_HOP_SECONDS", "5"))
    with tempfile.TemporaryDirectory(prefix="h2-hop-") as name:
        folder = Path(name)
        (folder / "app.py").write_text(_APP)
        subprocess.run(
            [
                *(
                    "openssl",
                    "req",
                    "-x509",
                    "-newkey",
                    "ec",
                    "-pkeyopt",
                    "ec_paramgen_curve:P-256",
                    "-nodes",
                ),
                *("-keyout", str(folder / "key.pem"), "-out", str(folder / "cert.pem"), "-days", "1"),
                *("-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"),
            ],
            check=True,
            capture_output=True,
        )
        print("| server | c | requests/s | client µs/request | server µs/request |")
        print("|---|---:|---:|---:|---:|")
        for kind in ("hypercorn h2", "hypercorn h1", "uvicorn h1"):
            port = _free_port()
            server = _server(kind, folder, port)
            try:
                for concurrency in (1, 64):
                    url = f"https://127.0.0.1:{port}/v1/chat/completions"
                    client_before, server_before = time.process_time(), _cpu_s(server.pid)
                    started = time.monotonic()
                    load = partial(_load, url, kind.endswith("h2"), concurrency, seconds, folder / "cert.pem")
                    done = anyio.run(load, backend_options={"use_uvloop": True})
                    elapsed = time.monotonic() - started
                    client_us = (time.process_time() - client_before) * 1e6 / done
                    server_us = (_cpu_s(server.pid) - server_before) * 1e6 / done
                    rate = done / elapsed
                    print(
                        f"| {kind} | {concurrency} | {rate:,.0f} | {client_us:.0f} | {server_us:.0f} |",
                        flush=True,
                    )
            finally:
                server.terminate()
                server.wait(timeout=15)


if __name__ == "__main__":
    main()
