"""A stand-in for ``vllm serve`` that needs nothing but the standard library.

It parses the flags Mirbad's vLLM builder emits the way vLLM's argparse-based parser does (an unknown
flag or a bad value exits with status 2), prints vLLM-like log lines and serves the OpenAI-compatible
endpoints the router and agent proxy use: /health, /v1/models, /v1/chat/completions and /v1/completions
(JSON or SSE), /v1/embeddings and /metrics with the ``vllm:*`` series.

Environment switches for tests:
    FAKE_VLLM_FAIL: exit 1 right after start-up, logging this text as the last (error) line.
    FAKE_VLLM_STARTUP_DELAY_S: seconds to "load the model" before the port opens.
    FAKE_VLLM_TOKEN_DELAY_S: seconds between streamed chunks.
    FAKE_VLLM_SIM_STEP_S: turns the performance simulator on (below): the seconds of one decode step
        of a lone sequence at the reference configuration.
    FAKE_VLLM_SIM_EFFECT: how much the settings matter, 0 to 1 (default 1; 0: noise only).
    FAKE_VLLM_SIM_NOISE: the relative standard deviation of each request's pace (default 0.02).
    FAKE_VLLM_SIM_SEED: seeds the noise (else ``--seed``, else 0).
    FAKE_VLLM_SIM_BATCH_LIMIT: the largest ``max_num_seqs x max_num_batched_tokens`` the simulated
        memory admits (default 65536); a larger batch fails to start with an out-of-memory error.

The performance simulator (for the tuning tests) makes the tuned settings matter for real wall time:
every streamed token waits ``step / tokens_per_step`` seconds, scaled by the pace of this request (a
seeded Gaussian factor around 1), and the first token also waits for the prefill. With ``E`` the
effect, each setting's factor ``f`` acts as ``1 + E * (f - 1)``:

* batching: a step of ``N`` running sequences takes ``1 + (N - 1) / 16`` lone steps (more sequences
  per step, more throughput), and at most ``max_num_seqs`` run at once: the rest wait in the queue
  (the limit holds only while ``E > 0``);
* ``max_num_seqs``: each reserved slot costs bookkeeping, a step takes ``1 + max_num_seqs / 64``;
* ``max_num_batched_tokens`` (unset: 2048): up to 2048 a step takes 1.3x (the prefills are chunked
  small and the decodes wait on them), up to 8192 1x, above 1.15x;
* ``kv_cache_dtype`` fp8: a step takes 1 / 1.1 (half the KV bytes to read);
* async scheduling on: 1 / 1.15 (the CPU schedules while the accelerator runs);
* cudagraph_mode: FULL_AND_PIECEWISE (the default) 1x, PIECEWISE 1.1x, NONE 1.3x; with speculative
  decoding FULL_AND_PIECEWISE resolves to PIECEWISE (as vLLM's attention backends do);
* speculative decoding of depth ``d``: a step takes ``1 + 0.15 d`` and yields ``1 + a(d) / (1 + (N -
  1) / 8)`` tokens, ``a = 0, 0.7, 1.1, 1.2`` for ``d = 0..3`` (1.2 beyond): acceptance falls as the
  batch grows;
* prefix caching (on unless ``--no-enable-prefix-caching``): a prompt seen before prefills in a tenth
  of the time and its usage reports the cached tokens; the prefill costs ``step / 50`` per prompt word;
* an embeddings request is one pooling pass of ``1 + words / 50`` steps at the batch's pace, holding
  a sequence slot like a stream.

Its known best, for the balanced goal with the suite's levels 1 and N: ``max_num_seqs`` N (fewer queue
part of the top level, more pay for slots never filled; of 4/8/16/32 at N = 8: 8),
``max_num_batched_tokens`` 8192 (16384 with 8 sequences exceeds the default batch limit and fails to
start), KV fp8, async scheduling on, prefix caching on, cudagraph FULL_AND_PIECEWISE and, where the
model has MTP layers, speculative depth 2.
:func:`simulated_pace` computes the model without a server, so a test can state its optimum.

The log prints the notices vLLM prints and RuntimeNotes reads: the engine's resolved config
(``speculative_config=SpeculativeConfig(...)``, ``'cudagraph_mode': <CUDAGraphMode.X: ...>``), the
chunked-prefill budget, ``Asynchronous scheduling is enabled.`` (or ``disabled.``), the speculative
warning ``max_num_scheduled_tokens is set to N based on the speculative decoding settings`` and the
engine's ``setting cudagraph_mode=PIECEWISE`` downgrade after its config line, in real vLLM's order and
words (``tests/orchestration/test_tuning_runtime_notes.py`` reads them with the product's parser).

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
import random
import signal
import struct
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

START_LINE = "Starting vLLM API server on"
FAILURE_PREAMBLE_LINES = 30
FAILURE_LINGER_S = 0.5
EMBEDDING_SIZE = 16
SIM_BATCH_LIMIT = 65536
"""The default largest ``max_num_seqs x max_num_batched_tokens`` the simulated memory admits."""
DEFAULT_BATCHED_TOKENS = 2048
"""What the simulator takes for an unset ``--max-num-batched-tokens``."""
_ACCEPTED = (0.0, 0.7, 1.1, 1.2)  # draft tokens accepted per step of a lone sequence, by depth
_CUDAGRAPH_COST = {
    "NONE": 1.3,
    "PIECEWISE": 1.1,
    "FULL": 1.0,
    "FULL_DECODE_ONLY": 1.0,
    "FULL_AND_PIECEWISE": 1.0,
}
_CUDAGRAPH_VALUE = {"NONE": "0", "PIECEWISE": "1", "FULL": "2", "FULL_DECODE_ONLY": "(2, 0)",
                    "FULL_AND_PIECEWISE": "(2, 1)"}  # fmt: skip


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
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--runner", choices=["auto", "generate", "pooling", "draft"], default="auto")
    parser.add_argument("--convert", choices=["auto", "none", "embed", "classify", "reward"], default="auto")
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


def log(
    message: str,
    *,
    stream: Any = None,
    level: str = "INFO",
    source: str = "fake_vllm.py",
    process: str | None = None,
) -> None:
    """One vLLM-style log line, flushed at once so ``docker logs`` sees it.

    ``process`` is vLLM's ``(APIServer pid=1)`` / ``(EngineCore pid=N)`` prefix, for the lines that
    carry it in a real log (the engine notices RuntimeNotes reads).
    """
    stamp = time.strftime("%m-%d %H:%M:%S")
    prefix = f"({process}) " if process else ""
    print(f"{prefix}{level} {stamp} [{source}] {message}", file=stream or sys.stdout, flush=True)


@dataclass(frozen=True)
class SimSettings:
    """The performance simulator's knobs (see the module); None from :meth:`from_env` when it is off."""

    step_s: float
    effect: float = 1.0
    noise: float = 0.02
    seed: int = 0
    batch_limit: int = SIM_BATCH_LIMIT

    @classmethod
    def from_env(cls, args: argparse.Namespace, env: dict[str, str] | None = None) -> SimSettings | None:
        env = dict(os.environ) if env is None else env
        step_s = float(env.get("FAKE_VLLM_SIM_STEP_S") or 0)
        if step_s <= 0:
            return None
        seed = env.get("FAKE_VLLM_SIM_SEED") or (args.seed if args.seed is not None else 0)
        return cls(
            step_s=step_s,
            effect=min(1.0, max(0.0, float(env.get("FAKE_VLLM_SIM_EFFECT") or 1.0))),
            noise=max(0.0, float(env.get("FAKE_VLLM_SIM_NOISE") or 0.02)),
            seed=int(seed),
            batch_limit=int(env.get("FAKE_VLLM_SIM_BATCH_LIMIT") or SIM_BATCH_LIMIT),
        )


def speculative_depth(args: argparse.Namespace) -> int:
    """The draft tokens per step ``--speculative-config`` asks for (0: no speculative decoding)."""
    config = args.speculative_config or {}
    depth = config.get("num_speculative_tokens") or 0
    return int(depth) if isinstance(depth, int | float) else 0


def batched_tokens(args: argparse.Namespace) -> int:
    """The step's token budget (vLLM's online default when unset)."""
    return args.max_num_batched_tokens or DEFAULT_BATCHED_TOKENS


def resolved_cudagraph_mode(args: argparse.Namespace) -> str:
    """The cudagraph mode after vLLM's resolution: FULL_AND_PIECEWISE falls back with speculative decoding."""
    requested = str((args.compilation_config or {}).get("cudagraph_mode") or "FULL_AND_PIECEWISE").upper()
    if requested == "FULL_AND_PIECEWISE" and speculative_depth(args):
        return "PIECEWISE"
    return requested if requested in _CUDAGRAPH_COST else "FULL_AND_PIECEWISE"


def _scaled(factor: float, effect: float) -> float:
    return 1.0 + effect * (factor - 1.0)


def simulated_pace(args: argparse.Namespace, running: int, *, effect: float = 1.0) -> float:
    """The steps (of a lone sequence at the reference) one streamed token of ``running`` sequences takes.

    The performance model of the module's docstring, without noise: multiply by ``step_s`` for seconds.
    """
    step = 1.0 + (max(1, running) - 1) / 16
    step *= _scaled(1.0 + args.max_num_seqs / 64, effect)
    budget = batched_tokens(args)
    step *= _scaled(1.3 if budget <= 2048 else 1.0 if budget <= 8192 else 1.15, effect)
    if str(args.kv_cache_dtype).startswith("fp8"):
        step /= _scaled(1.1, effect)
    if args.async_scheduling:
        step /= _scaled(1.15, effect)
    step *= _scaled(_CUDAGRAPH_COST[resolved_cudagraph_mode(args)], effect)
    depth = speculative_depth(args)
    step *= _scaled(1.0 + 0.15 * depth, effect)
    accepted = _ACCEPTED[min(depth, len(_ACCEPTED) - 1)] / (1.0 + (max(1, running) - 1) / 8)
    return step / (1.0 + effect * accepted)


def batch_refusal(args: argparse.Namespace, limit: int) -> str | None:
    """vLLM's out-of-memory error when the batch exceeds the simulated memory, else None."""
    need = args.max_num_seqs * batched_tokens(args)
    if need <= limit:
        return None
    gib = need * 16 / 1024**2  # the profiling run's activations: 16 KiB per scheduled token
    return (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {gib:.2f} GiB during the "
        f"profile run (max_num_seqs={args.max_num_seqs} x max_num_batched_tokens={batched_tokens(args)} "
        f"is over the simulated limit {limit}). Try decreasing max_num_batched_tokens or max_num_seqs."
    )


def log_engine_notices(args: argparse.Namespace) -> None:
    """The start-up notices vLLM prints about the configuration it resolved (RuntimeNotes reads them).

    In real vLLM's (0.20.2) order and words: the API server's notices (the chunked-prefill budget,
    asynchronous scheduling on or off, the speculative cap on scheduled tokens), then the engine's
    config line with the CUDA graph mode it was asked for, then the engine's downgrade of that mode
    when spec-decode cannot capture full graphs.
    """
    api, engine = "APIServer pid=1", f"EngineCore pid={os.getpid()}"
    depth = speculative_depth(args)
    budget = batched_tokens(args)
    log(
        f"Chunked prefill is enabled with max_num_batched_tokens={budget}.",
        source="scheduler.py:239",
        process=api,
    )
    state = "enabled" if args.async_scheduling else "disabled"
    log(f"Asynchronous scheduling is {state}.", source="vllm.py:840", process=api)
    if depth:
        scheduled = budget - args.max_num_seqs * depth
        log(
            f"max_num_scheduled_tokens is set to {scheduled} based on the speculative decoding settings. "
            "This may lead to suboptimal performance.",
            level="WARNING",
            source="vllm.py:1406",
            process=api,
        )
    spec = args.speculative_config or {}
    speculative = (
        f"SpeculativeConfig(method={spec.get('method')!r}, model={spec.get('model') or args.model!r}, "
        f"num_spec_tokens={depth})"
        if depth
        else "None"
    )
    caching = args.enable_prefix_caching is not False
    requested = str((args.compilation_config or {}).get("cudagraph_mode") or "FULL_AND_PIECEWISE").upper()
    started = requested if requested in _CUDAGRAPH_VALUE else "FULL_AND_PIECEWISE"
    log(
        f"Initializing a V1 LLM engine (v0.0.0+fake) with config: model={args.model!r}, "
        f"speculative_config={speculative}, max_seq_len={args.max_model_len}, "
        f"kv_cache_dtype={args.kv_cache_dtype}, enable_prefix_caching={caching}, "
        f"compilation_config={{'cudagraph_mode': <CUDAGraphMode.{started}: {_CUDAGRAPH_VALUE[started]}>}}",
        source="core.py:109",
        process=engine,
    )
    mode = resolved_cudagraph_mode(args)
    if mode != started:
        log(
            f"CUDAGraphMode.{started} is not supported with spec-decode for attention backend "
            "FlashAttentionBackend (support: AttentionCGSupport.UNIFORM_BATCH); "
            f"setting cudagraph_mode={mode}",
            level="WARNING",
            source="compilation.py:1390",
            process=engine,
        )


def _sleep_until(deadline: float) -> None:
    """Sleep until ``deadline`` on the monotonic clock (not at all when it has passed)."""
    left = deadline - time.monotonic()
    if left > 0:
        time.sleep(left)


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
        self.sim = SimSettings.from_env(args)
        self.rng = random.Random(self.sim.seed if self.sim else 0)
        limited = self.sim is not None and self.sim.effect > 0
        self.slots = threading.BoundedSemaphore(args.max_num_seqs) if limited else None
        self.seen_prompts: set[str] = set()

    @contextmanager
    def slot(self) -> Iterator[None]:
        """Hold one of ``max_num_seqs`` sequence slots (the simulator's queue; no limit otherwise)."""
        with self.slots if self.slots is not None else nullcontext():
            yield

    def pace(self) -> float:
        """One request's seeded pace factor (1 without the simulator)."""
        if self.sim is None:
            return 1.0
        with self.lock:
            return max(0.2, self.rng.gauss(1.0, self.sim.noise))

    def cached(self, prompt: list[str]) -> int:
        """The prompt words the simulator's prefix caching reuses (all of a prompt seen before)."""
        key = " ".join(prompt)
        with self.lock:
            seen = key in self.seen_prompts
            self.seen_prompts.add(key)
        caching = self.sim is not None and self.args.enable_prefix_caching is not False
        return len(prompt) if seen and caching else 0

    def pool_pause(self, pace: float, words: int) -> float:
        """Seconds one embeddings request takes in the simulator (a pass scaled by the batch's words)."""
        assert self.sim is not None
        with self.lock:
            running = self.running
        pass_steps = simulated_pace(self.args, running, effect=self.sim.effect) * (1 + words / 50)
        return self.sim.step_s * pace * pass_steps

    def token_pause(self, pace: float, *, prefill_words: int = 0) -> float:
        """Seconds before the next streamed token: the chunk delay, or the simulator's model."""
        if self.sim is None:
            return self.token_delay
        with self.lock:
            running = self.running
        step = self.sim.step_s * pace
        decode = step * simulated_pace(self.args, running, effect=self.sim.effect)
        return decode + step / 50 * prefill_words

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
        usage: dict[str, Any] = {"prompt_tokens": len(prompt), "completion_tokens": len(tokens)}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        streamed = bool(body.get("stream"))
        # Only streams are timed by a benchmark: a whole answer never waits in the simulator's queue.
        with self.engine.slot() if streamed else nullcontext():
            cached = self.engine.cached(prompt)
            if cached:
                usage["prompt_tokens_details"] = {"cached_tokens": cached}
            self.engine.admit(len(prompt))
            try:
                if streamed:
                    options = body.get("stream_options") or {}
                    included = usage if options.get("include_usage") else None
                    self._stream(
                        model, tokens, finish, included, chat=chat, prefill=len(prompt) - cached * 9 // 10
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
        self,
        model: str,
        tokens: list[str],
        finish: str,
        usage: dict[str, Any] | None,
        *,
        chat: bool,
        prefill: int = 0,
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
        pace = self.engine.pace()
        # The simulator paces to deadlines from the stream's start: a sleep that overshoots on a busy
        # machine, or a slow write, delays that one token, not every token after it. Sleeping each
        # pause in turn summed every overshoot into the stream's time, a drift of the machine's load
        # that the tuning tests read as the settings' effect.
        due = time.monotonic()
        for index, piece in enumerate(pieces):
            if self.engine.sim is not None and index == int(chat):
                # The first token waits for the prefill (less the cached words) and its first step.
                due += self.engine.token_pause(pace, prefill_words=prefill)
                _sleep_until(due)
            choice = {"index": 0, "logprobs": None, "finish_reason": None, **piece}
            self._event({**envelope, "choices": [choice]})
            pause = self.engine.token_pause(pace)
            if pause and self.engine.sim is None:
                time.sleep(pause)
            elif pause and int(chat) <= index < len(pieces) - 2:
                due += pause
                _sleep_until(due)
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
        with self.engine.slot():
            self.engine.admit(tokens)
            try:
                if self.engine.sim is not None:
                    time.sleep(self.engine.pool_pause(self.engine.pace(), tokens))
            finally:
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
    # Real vLLM takes a moment to tear its engine down after the error; exiting at once raced dockerd's
    # log copier on a loaded machine, which may then drop the last lines when the container stops.
    time.sleep(FAILURE_LINGER_S)
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
    failure = os.environ.get("FAKE_VLLM_FAIL")
    if failure:
        # A start that dies writes one stream only: Docker merges two in arrival order, which put a line
        # written before the error after it.
        sys.stdout = sys.stderr
    log(f"non-default args: {given}")
    log_engine_notices(args)
    if failure:
        return _fail(failure)
    sim = SimSettings.from_env(args)
    refusal = batch_refusal(args, sim.batch_limit) if sim is not None else None
    if refusal is not None:
        return _fail(refusal)
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
