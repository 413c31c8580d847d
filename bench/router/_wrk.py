"""The load generator when Debian's ``wrk`` is on PATH: C, one thread, kept-alive connections.

A Python generator on the same 2 cores as the stack measures itself at a few thousand requests/s
(it capped ``direct`` near 2.3k while wrk reaches ~30k), so every "% of direct" it gave was
flattering. wrk sends the POST body through a Lua script written per point; the script's ``done``
hook prints one JSON line with the counts and the latency percentiles, so nothing parses wrk's
human-readable summary.

wrk cannot present a client certificate, so the agent's mutual TLS is reached through
:mod:`bench.router._terminator` (plain HTTP in, the master's certificate out), whose CPU is reported
as its own process.
"""

from __future__ import annotations

import json
import math
import resource
import shutil
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from ._procfs import CpuSample

__all__ = ["WRK", "WrkRun", "response_bytes", "run_wrk", "wrk_missing_reason"]

WRK: Final = "wrk"
_TIMEOUT_S: Final = 10
_SLACK_S: Final = 60.0
_SCRIPT: Final = """\
wrk.method = "POST"
wrk.body = [==[{body}]==]
{headers}
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '\\n@@{{"requests":%d,"duration_us":%d,"bytes":%d,"status":%d,"connect":%d,"read":%d,'
    .. '"write":%d,"timeout":%d,"p50_us":%d,"p99_us":%d}}\\n',
    summary.requests, summary.duration, summary.bytes, e.status, e.connect, e.read, e.write,
    e.timeout, latency:percentile(50), latency:percentile(99)))
end
"""


@dataclass(frozen=True)
class WrkRun:
    """What one wrk run measured, and the CPU the stack's processes and wrk itself used meanwhile.

    Attributes:
        requests: responses wrk read, of any status; ``errors`` (non-2xx, socket errors,
            timeouts) are among them or beside them, as wrk counts.
        cpu_s: CPU seconds per named process over the run, wrk's own as ``load generator``.
    """

    requests: int
    errors: int
    duration_s: float
    p50_ms: float
    p99_ms: float
    cpu_s: dict[str, float]
    machine_busy: float
    closed: int
    bytes_read: int = 0


def wrk_missing_reason() -> str | None:
    """Why wrk cannot be the load generator here, or None when it can."""
    if shutil.which(WRK) is None:
        return "`wrk` is not on PATH (Debian: apt-get install wrk)"
    return None


def run_wrk(
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    concurrency: int,
    duration_s: float,
    script_dir: Path,
    pids: Mapping[str, int],
    watch_port: int | None = None,
) -> WrkRun:
    """Run wrk (one thread, ``concurrency`` connections) for ``duration_s`` against ``url``.

    Raises:
        RuntimeError: wrk failed or printed no summary (its output is in the message).
    """
    script = _write_script(script_dir, body, {"content-type": "application/json", **headers})
    command = [WRK, "-t1", f"-c{concurrency}", f"-d{max(1, math.ceil(duration_s))}s"]
    command += [f"--timeout={_TIMEOUT_S}s", "-s", str(script), url]
    children_before = _children_cpu_s()
    before = CpuSample.take(dict(pids), watch_port)
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=duration_s + _SLACK_S, check=False
    )
    after = CpuSample.take(dict(pids), watch_port)
    summary = _summary(result)
    cpu = after.delta(before)
    cpu["load generator"] = _children_cpu_s() - children_before
    errors = summary["status"] + summary["connect"] + summary["read"] + summary["write"] + summary["timeout"]
    return WrkRun(
        requests=max(0, summary["requests"] - summary["status"]),
        errors=errors,
        duration_s=summary["duration_us"] / 1e6 or duration_s,
        p50_ms=summary["p50_us"] / 1000 if summary["requests"] else math.nan,
        p99_ms=summary["p99_us"] / 1000 if summary["requests"] else math.nan,
        cpu_s=cpu,
        machine_busy=after.machine_busy(before),
        closed=after.closed - before.closed,
        bytes_read=summary["bytes"],
    )


def response_bytes(url: str, body: bytes, headers: Mapping[str, str]) -> int:
    """The bytes of one whole response to ``body`` at plain-HTTP ``url``, as wrk counts them.

    wrk adds up every byte it reads, of whole responses and of those still arriving when its window
    ends; divided by this, that count says how many streams were read, a stream read in part by its
    share. (Counting only whole responses read a slow proxy's long streams as none at all.)

    Raises:
        OSError: the target did not answer.
    """
    parts = urlsplit(url)
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    lines = [f"POST {target} HTTP/1.1", f"Host: {parts.netloc}", "Content-Type: application/json"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    lines += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
    received = 0
    with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout=60) as sock:
        sock.sendall("\r\n".join(lines).encode() + body)
        while chunk := sock.recv(65536):
            received += len(chunk)
    return received


def _write_script(folder: Path, body: bytes, headers: Mapping[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    lines = "\n".join(
        f"wrk.headers[{json.dumps(name)}] = {json.dumps(value)}" for name, value in headers.items()
    )
    text = _SCRIPT.format(body=body.decode(), headers=lines)
    path = folder / f"wrk-{time.monotonic_ns()}.lua"
    path.write_text(text)
    return path


def _summary(result: subprocess.CompletedProcess[str]) -> dict[str, int]:
    for line in result.stdout.splitlines():
        if line.startswith("@@"):
            parsed: dict[str, int] = json.loads(line[2:])
            return parsed
    raise RuntimeError(f"wrk exited with {result.returncode} and no summary: {result.stdout}{result.stderr}")


def _children_cpu_s() -> float:
    # wrk is the only child that ends during a run: the stack's processes are still running.
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
