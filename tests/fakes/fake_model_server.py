"""A stand-in native model server (llama-server's plumbing only), standard library only.

It listens on ``--host``/``--port``, answers ``GET /health`` with 503 while "loading" and 200 after,
and ``GET /v1/models`` only with ``Authorization: Bearer $LLAMA_API_KEY`` when that variable is set.
Other flags are ignored. Environment switches for tests:

    FAKE_LOAD_S: seconds /health answers 503 before it answers 200.
    FAKE_IGNORE_SIGTERM: when set, SIGTERM is logged and ignored (the driver must SIGKILL).
    FAKE_EXIT_CODE: exit at once with this status after one log line.
    FAKE_BIND_AFTER: a file path; the server binds its port only once that file exists (a test takes
        the port in between to play another program winning the race for it).
    FAKE_STARTS_FILE: a file path; each start appends one line to it.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType


def _log(text: str) -> None:
    print(text, flush=True)


class _Handler(BaseHTTPRequestHandler):
    loaded_at = 0.0

    def do_GET(self) -> None:
        if self.path == "/health":
            self._answer(200 if time.monotonic() >= self.loaded_at else 503)
        elif self.path == "/v1/models":
            key = os.environ.get("LLAMA_API_KEY")
            authorized = key is None or self.headers.get("Authorization") == f"Bearer {key}"
            self._answer(200 if authorized else 401)
        else:
            self._answer(404)

    def _answer(self, status: int) -> None:
        body = b"{}"
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        _log("request: " + format % args)


def _ignore_term(signum: int, frame: FrameType | None) -> None:
    _log("ignoring SIGTERM")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    options, _ = parser.parse_known_args()
    if "FAKE_STARTS_FILE" in os.environ:
        with open(os.environ["FAKE_STARTS_FILE"], "a") as starts:
            starts.write(f"{options.port}\n")
    if "FAKE_EXIT_CODE" in os.environ:
        _log("fatal: cannot load the model")
        sys.exit(int(os.environ["FAKE_EXIT_CODE"]))
    if os.environ.get("FAKE_IGNORE_SIGTERM"):
        signal.signal(signal.SIGTERM, _ignore_term)
    _Handler.loaded_at = time.monotonic() + float(os.environ.get("FAKE_LOAD_S", "0"))
    bind_after = os.environ.get("FAKE_BIND_AFTER")
    deadline = time.monotonic() + 60
    while bind_after and not os.path.exists(bind_after) and time.monotonic() < deadline:
        time.sleep(0.02)
    server = ThreadingHTTPServer((options.host, options.port), _Handler)
    _log(f"listening on {options.host}:{options.port} in {os.getcwd()}")
    server.serve_forever()


if __name__ == "__main__":
    main()
