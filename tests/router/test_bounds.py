"""The token bound a key's limit reserves for a request before it is sent."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mirbad_router import RequestBody, parse_request_body, request_token_bound


def _body(payload: dict[str, Any]) -> RequestBody:
    return parse_request_body("application/json", json.dumps(payload).encode())


def test_a_completion_reserves_the_prompt_estimate_plus_n_times_its_output_limit() -> None:
    body = _body({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10, "n": 2})
    estimate = -(-len(body.content) // 4)
    assert request_token_bound("chat/completions", body) == estimate + 20


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("chat/completions", "max_completion_tokens"),
        ("completions", "max_tokens"),
        ("/responses", "max_output_tokens"),
    ],
)
def test_each_endpoint_reads_its_own_output_limit(path: str, field: str) -> None:
    body = _body({"model": "m", field: 100})
    assert request_token_bound(path, body) == -(-len(body.content) // 4) + 100


def test_without_an_output_limit_the_models_context_bounds_it_or_nothing_does() -> None:
    body = _body({"model": "m", "prompt": "x", "max_tokens": 0})
    assert request_token_bound("completions", body, context_tokens=4096) == 4096
    assert request_token_bound("completions", body) is None


def test_endpoints_that_generate_nothing_reserve_the_estimate() -> None:
    body = _body({"model": "m", "input": ["a", "b"], "max_tokens": 100})
    assert request_token_bound("embeddings", body) == -(-len(body.content) // 4)


def test_empty_and_multipart_bodies() -> None:
    assert request_token_bound("files", RequestBody(b"", None)) == 0
    assert request_token_bound("audio/transcriptions", RequestBody(b"--x\r\n", "m")) is None
