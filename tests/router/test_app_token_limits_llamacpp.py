"""Issue 31's three token-limit bypasses against a real llama-server serving the tiny model.

llama-server reads ``n_predict`` before ``max_completion_tokens`` before ``max_tokens``, keeps generating
until its context is full when it has none of them, and counts what it generates in its own metrics
(``llamacpp:tokens_predicted_total``, aborted generations included). Those counters, plus each admitted
request's prompt, are what the key's 50 tokens are compared with: llama-server's account, not the router's.
"""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx
import pytest
from tests._support.asgi_server import free_port
from tests._support.real_parts import llama_server_path
from tests._support.tiny_gguf import write_tiny_gguf
from tests.router._limited import (
    LIMIT,
    OPEN_KEY,
    LimitedRouter,
    leave_before_usage,
    leave_the_length_out,
    limited_router,
    override_the_length,
)

pytestmark = [pytest.mark.llamacpp, pytest.mark.anyio, pytest.mark.timeout(120)]

CONTEXT = 256
PROMPT = {"model": "tiny", "prompt": "hi"}


@dataclass
class Llama:
    router: LimitedRouter
    direct: httpx.AsyncClient
    prompt_tokens: int

    async def predicted(self) -> int:
        """The tokens llama-server has generated so far, by its own count."""
        metrics = (await self.direct.get("/metrics")).text
        line = next(
            line for line in metrics.splitlines() if line.startswith("llamacpp:tokens_predicted_total")
        )
        return int(float(line.split()[-1]))


@pytest.fixture
async def llama(tmp_path: Path) -> AsyncIterator[Llama]:
    binary = llama_server_path()
    assert binary is not None  # the llamacpp marker skips (or fails) the test without it
    model = write_tiny_gguf(tmp_path / "tiny.gguf")
    port = free_port()
    argv = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port)]
    argv += ["-c", str(CONTEXT), "-np", "1", "--metrics"]
    with (tmp_path / "llama.log").open("wb") as log:
        process = await anyio.open_process(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        async with (
            httpx.AsyncClient(base_url=base, trust_env=False, timeout=30) as direct,
            limited_router(base) as router,
        ):
            await _wait_healthy(direct)
            # A request through the key without limits: llama-server's prompt size for this prompt.
            async with router.http(OPEN_KEY) as http:
                warm = await http.post("/v1/completions", json={**PROMPT, "max_tokens": 1})
            yield Llama(router, direct, warm.json()["usage"]["prompt_tokens"])
    finally:
        process.terminate()
        with anyio.fail_after(10):
            await process.wait()


async def _wait_healthy(client: httpx.AsyncClient) -> None:
    with anyio.fail_after(30):
        while True:
            try:
                if (await client.get("/health")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await anyio.sleep(0.05)


async def test_leaving_before_the_usage_chunk(llama: Llama) -> None:
    before = await llama.predicted()
    admitted = await leave_before_usage(llama.router, {**PROMPT, "max_tokens": 5})
    spent = await llama.predicted() - before + admitted * llama.prompt_tokens
    assert admitted >= 1
    assert spent <= LIMIT, f"{admitted} of 10 early leavers spent {spent} tokens"


async def test_n_predict_over_max_tokens(llama: Llama) -> None:
    before = await llama.predicted()
    admitted = await override_the_length(llama.router, {**PROMPT, "max_tokens": 5, "n_predict": 4540})
    spent = await llama.predicted() - before + admitted * llama.prompt_tokens
    assert admitted >= 1
    assert spent <= LIMIT, f"{admitted} of 20 requests spent {spent} tokens"


async def test_no_length_at_all(llama: Llama) -> None:
    before = await llama.predicted()
    admitted = await leave_the_length_out(llama.router, PROMPT)
    spent = await llama.predicted() - before + admitted * llama.prompt_tokens
    assert admitted == 1
    assert spent <= LIMIT, f"{spent} tokens spent"
