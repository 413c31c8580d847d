"""A stand-in for ``vllm serve`` that needs nothing but the standard library.

It parses the flags Mirbad's vLLM builder emits the way vLLM's argparse-based parser does (an unknown
flag or a bad value exits with status 2), prints vLLM-like log lines and serves the OpenAI-compatible
endpoints the router and agent proxy use: /health, /v1/models, /v1/chat/completions and /v1/completions
(JSON or SSE), /v1/embeddings and /metrics with the ``vllm:*`` series.

Environment switches for tests:
    FAKE_VLLM_FAIL: exit 1 right after start-up, logging this text as the last (error) line.
    FAKE_VLLM_STARTUP_DELAY_S: seconds to "load the model" before the port opens.
    FAKE_VLLM_TOKEN_DELAY_S: seconds between streamed chunks.

Run it as a script (``python fake_vllm.py --model /models/x --port 8000``); the test image uses it as
its entrypoint.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import math
import os
import signal
import struct
import sys
import threading
import time
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

START_LINE = "Starting vLLM API server on"
FAILURE_PREAMBLE_LINES = 30
EMBEDDING_SIZE = 16


def _context_length(text: str) -> int:
    """vLLM accepts plain integers and human-friendly sizes such as 32k."""
    scale = {"k": 1000, "K": 1024, "m": 1_000_000, "M": 1024 * 1024}.get(text[-1:], 1)
    number = text[:-1] if scale != 1 else text
    try:
        return int(float(number) * scale)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid context length {text!r}") from None


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("expected a JSON object")
    return value


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not in (0, 1]")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The subset of ``vllm serve``'s flags the builder emits, with vLLM's spellings."""
    parser = argparse.ArgumentParser(prog="vllm serve", allow_abbrev=False)
    parser.add_argument("model_tag", nargs="?", default=None)
    parser.add_argument("--model", default="facebook/opt-125m")
    parser.add_argument("--served-model-name", nargs="+", default=None)
    parser.add_argument("--quantization", "-q", default=None)
    parser.add_argument("--kv-cache-dtype", default="auto")
    parser.add_argument("--max-model-len", type=_context_length, default=4096)
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--max-num-batched-tokens", type=int, default=None)
    parser.add_argument("--gpu-memory-utilization", type=_fraction, default=0.9)
    parser.add_argument("--enable-auto-tool-choice", action="store_true")
    parser.add_argument("--tool-call-parser", default=None)
    parser.add_argument("--reasoning-parser", default=None)
    parser.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--speculative-config", type=_json_object, default=None)
    parser.add_argument("--compilation-config", "-cc", type=_json_object, default=None)
    parser.add_argument("--async-scheduling", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--mamba-cache-mode", default=None)
    parser.add_argument("--disable-access-log-for-endpoints", default="")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8000)
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse like vLLM: exit 2 on unknown flags, bad values and flag combinations vLLM refuses."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.model_tag is not None:
        args.model = args.model_tag
    if args.enable_auto_tool_choice and not args.tool_call_parser:
        parser.error("--enable-auto-tool-choice requires --tool-call-parser")
    args.served_names = args.served_model_name or [args.model]
    args.quiet_paths = {path for path in args.disable_access_log_for_endpoints.split(",") if path}
    return args


def log(message: str, *, stream: Any = None) -> None:
    """One vLLM-style log line, flushed at once so ``docker logs`` sees it."""
    stamp = time.strftime("%m-%d %H:%M:%S")
    print(f"INFO {stamp} [fake_vllm.py] {message}", file=stream or sys.stdout, flush=True)


class Engine:
    """The fake engine's counters, shared by the request threads."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.created = int(time.time())
        self.lock = threading.Lock()
        self.running = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.token_delay = float(os.environ.get("FAKE_VLLM_TOKEN_DELAY_S", "0") or 0)

    def admit(self, prompt_tokens: int) -> None:
        with self.lock:
            self.running += 1
            self.prompt_tokens += prompt_tokens

    def finish(self, generated: int) -> None:
        with self.lock:
            self.running -= 1
            self.generation_tokens += generated

    def metrics(self) -> str:
        with self.lock:
            running, prompt, generated = self.running, self.prompt_tokens, self.generation_tokens
        usage = min(1.0, running / max(self.args.max_num_seqs, 1))
        labels = f'{{engine="0",model_name="{self.args.served_names[0]}"}}'
        series = [
            ("vllm:num_requests_running", "gauge", "vllm:num_requests_running", running),
            ("vllm:num_requests_waiting", "gauge", "vllm:num_requests_waiting", 0),
            ("vllm:kv_cache_usage_perc", "gauge", "vllm:kv_cache_usage_perc", usage),
            ("vllm:prompt_tokens", "counter", "vllm:prompt_tokens_total", prompt),
            ("vllm:generation_tokens", "counter", "vllm:generation_tokens_total", generated),
        ]
        lines: list[str] = []
        for family, kind, sample, value in series:
            lines += [f"# HELP {family} {family} (fake)", f"# TYPE {family} {kind}"]
            lines.append(f"{sample}{labels} {float(value)}")
        return "\n".join(lines) + "\n"


def words_of(content: Any) -> list[str]:
    """The whitespace-separated "tokens" of a message content (a string or a list of parts)."""
    if isinstance(content, str):
        return content.split()
    if isinstance(content, list):
        return [
            word for part in content if isinstance(part, dict) for word in str(part.get("text", "")).split()
        ]
    return []


def reply_tokens(prompt_words: list[str], max_tokens: int) -> tuple[list[str], str]:
    """A deterministic reply (an echo) cut at ``max_tokens``, with its finish reason."""
    reply = ["fake", "reply:", *prompt_words[-8:]]
    if len(reply) > max_tokens:
        return reply[:max_tokens], "length"
    return reply, "stop"


def embedding_of(text: str) -> list[float]:
    """A unit vector derived from the text's hash, so equal inputs embed equally."""
    digest = hashlib.sha256(text.encode()).digest()
    raw = [byte - 127.5 for byte in digest[:EMBEDDING_SIZE]]
    norm = math.sqrt(sum(value * value for value in raw)) or 1.0
    return [value / norm for value in raw]


class Handler(BaseHTTPRequestHandler):
    """Routes the OpenAI-compatible endpoints of one request."""

    protocol_version = "HTTP/1.1"
    server_version = "fake-vllm"
    engine: Engine

    def log_message(self, format: str, *args: Any) -> None:
        """Access log lines in uvicorn's shape, minus the endpoints vLLM was told to keep quiet."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        path = self.path.split("?", 1)[0]
        if path not in self.engine.args.quiet_paths:
            status = int(code) if str(code).isdigit() else 0
            log(f'{self.client_address[0]}:{self.client_address[1]} - "{self.requestline}" {status}')

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/health":
            self._send(HTTPStatus.OK, b"", "application/json")
        elif path == "/v1/models":
            self._json(HTTPStatus.OK, self._models())
        elif path == "/metrics":
            self._send(
                HTTPStatus.OK, self.engine.metrics().encode(), "text/plain; version=0.0.4; charset=utf-8"
            )
        else:
            self._error(HTTPStatus.NOT_FOUND, "Not Found", "NotFoundError")

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        routes = {
            "/v1/chat/completions": self._chat,
            "/v1/completions": self._completion,
            "/v1/embeddings": self._embeddings,
        }
        route = routes.get(path)
        if route is None:
            self._error(HTTPStatus.NOT_FOUND, "Not Found", "NotFoundError")
            return
        body = self._body()
        if body is None:
            return
        model = body.get("model") or self.engine.args.served_names[0]
        if model not in self.engine.args.served_names:
            self._error(
                HTTPStatus.NOT_FOUND, f"The model `{model}` does not exist.", "NotFoundError", "model"
            )
            return
        route(body, model)

    def _models(self) -> dict[str, Any]:
        args = self.engine.args
        data = [
            {
                "id": name,
                "object": "model",
                "created": self.engine.created,
                "owned_by": "vllm",
                "root": args.model,
                "parent": None,
                "max_model_len": args.max_model_len,
            }
            for name in args.served_names
        ]
        return {"object": "list", "data": data}

    def _chat(self, body: dict[str, Any], model: str) -> None:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            self._error(
                HTTPStatus.BAD_REQUEST, "messages must be a non-empty list", "BadRequestError", "messages"
            )
            return
        prompt = [
            word
            for message in messages
            if isinstance(message, dict)
            for word in words_of(message.get("content"))
        ]
        self._generate(body, model, prompt, chat=True)

    def _completion(self, body: dict[str, Any], model: str) -> None:
        prompt = body.get("prompt", "")
        texts = prompt if isinstance(prompt, list) else [prompt]
        self._generate(body, model, [word for text in texts for word in words_of(str(text))], chat=False)

    def _generate(self, body: dict[str, Any], model: str, prompt: list[str], *, chat: bool) -> None:
        limit = body.get("max_completion_tokens") or body.get("max_tokens") or 16
        tokens, finish = reply_tokens(prompt, int(limit))
        usage = {"prompt_tokens": len(prompt), "completion_tokens": len(tokens)}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        self.engine.admit(len(prompt))
        try:
            if body.get("stream"):
                options = body.get("stream_options") or {}
                self._stream(
                    model, tokens, finish, usage if options.get("include_usage") else None, chat=chat
                )
            else:
                self._json(HTTPStatus.OK, self._whole(model, tokens, finish, usage, chat=chat))
        finally:
            self.engine.finish(len(tokens))

    def _whole(
        self, model: str, tokens: list[str], finish: str, usage: dict[str, int], *, chat: bool
    ) -> dict[str, Any]:
        text = " ".join(tokens)
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": finish}
        if chat:
            choice["message"] = {"role": "assistant", "content": text, "tool_calls": []}
        else:
            choice["text"] = text
        return {**self._envelope(model, chat=chat, chunk=False), "choices": [choice], "usage": usage}

    def _stream(
        self, model: str, tokens: list[str], finish: str, usage: dict[str, int] | None, *, chat: bool
    ) -> None:
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        envelope = self._envelope(model, chat=chat, chunk=True)
        pieces: list[dict[str, Any]] = []
        if chat:
            pieces.append({"delta": {"role": "assistant", "content": ""}, "finish_reason": None})
        for index, token in enumerate(tokens):
            text = token if index == 0 else " " + token
            pieces.append({"delta": {"content": text}, "finish_reason": None} if chat else {"text": text})
        pieces.append(
            {"delta": {}, "finish_reason": finish} if chat else {"text": "", "finish_reason": finish}
        )
        for piece in pieces:
            choice = {"index": 0, "logprobs": None, "finish_reason": None, **piece}
            self._event({**envelope, "choices": [choice]})
            if self.engine.token_delay:
                time.sleep(self.engine.token_delay)
        if usage is not None:
            self._event({**envelope, "choices": [], "usage": usage})
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")

    def _envelope(self, model: str, *, chat: bool, chunk: bool) -> dict[str, Any]:
        kind = ("chat.completion.chunk" if chunk else "chat.completion") if chat else "text_completion"
        prefix = "chatcmpl" if chat else "cmpl"
        return {
            "id": f"{prefix}-{uuid.uuid4().hex}",
            "object": kind,
            "created": int(time.time()),
            "model": model,
        }

    def _embeddings(self, body: dict[str, Any], model: str) -> None:
        raw = body.get("input", "")
        texts = [raw] if isinstance(raw, str) or (raw and isinstance(raw[0], int)) else list(raw)
        data, tokens = [], 0
        for index, text in enumerate(texts):
            vector = embedding_of(json.dumps(text))
            tokens += len(text) if isinstance(text, list) else max(len(str(text).split()), 1)
            value: Any = vector
            if body.get("encoding_format") == "base64":
                value = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
            data.append({"object": "embedding", "index": index, "embedding": value})
        self.engine.admit(tokens)
        self.engine.finish(0)
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        self._json(HTTPStatus.OK, {"object": "list", "model": model, "data": data, "usage": usage})

    def _body(self) -> dict[str, Any] | None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError as exc:
            self._error(HTTPStatus.BAD_REQUEST, f"invalid JSON: {exc}", "BadRequestError")
            return None
        if not isinstance(body, dict):
            self._error(HTTPStatus.BAD_REQUEST, "the body must be a JSON object", "BadRequestError")
            return None
        return body

    def _event(self, payload: dict[str, Any]) -> None:
        self._chunk(b"data: " + json.dumps(payload).encode() + b"\n\n")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _error(self, status: HTTPStatus, message: str, kind: str, param: str | None = None) -> None:
        error = {"message": message, "type": kind, "param": param, "code": int(status)}
        self._json(status, {"error": error})

    def _json(self, status: HTTPStatus, payload: dict[str, Any]) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json")

    def _send(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _fail(message: str) -> int:
    # One stream only: Docker merges stdout and stderr in arrival order, which may differ from ours.
    for step in range(1, FAILURE_PREAMBLE_LINES + 1):
        log(f"loading model step {step}/{FAILURE_PREAMBLE_LINES}", stream=sys.stderr)
    print(f"ERROR fake-vllm: {message}", file=sys.stderr, flush=True)
    return 1


def _stop(signum: int, frame: object) -> None:
    # As PID 1 in a container SIGTERM is ignored unless handled; turn it into a clean exit.
    raise SystemExit(0)


def main(argv: list[str] | None = None) -> int:
    """Parse the flags, then serve until SIGTERM or SIGINT."""
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    args = parse_args(argv)
    defaults = vars(build_parser().parse_args([]))
    given = {key: value for key, value in vars(args).items() if key in defaults and value != defaults[key]}
    log(f"non-default args: {given}")
    failure = os.environ.get("FAKE_VLLM_FAIL")
    if failure:
        return _fail(failure)
    time.sleep(float(os.environ.get("FAKE_VLLM_STARTUP_DELAY_S", "0") or 0))
    handler = type("BoundHandler", (Handler,), {"engine": Engine(args)})
    server = ThreadingHTTPServer((args.host, args.port), handler)
    server.daemon_threads = True
    log(f"{START_LINE} http://{args.host}:{server.server_address[1]}")
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
        log("Shutting down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
