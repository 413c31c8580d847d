"""The token bound a key's limit reserves for a request before it is sent."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirbad_router import (
    RequestBody,
    fit_output_to,
    parse_request_body,
    request_token_bound,
    request_token_floor,
)


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


def test_every_engines_length_field_bounds_the_request_by_the_smallest() -> None:
    body = _body(
        {"model": "m", "prompt": "x", "max_tokens": 500, "n_predict": 40, "max_completion_tokens": 90}
    )
    assert request_token_bound("completions", body) == -(-len(body.content) // 4) + 40
    lifted = _body({"model": "m", "prompt": "x", "max_tokens": 5, "n_predict": -1})
    assert request_token_bound("completions", lifted) == -(-len(lifted.content) // 4) + 5


def test_best_of_counts_as_sequences_and_the_floor_is_the_prompt_plus_one_token_each() -> None:
    body = _body({"model": "m", "prompt": "x", "max_tokens": 10, "n": 2, "best_of": 3})
    estimate = -(-len(body.content) // 4)
    assert request_token_bound("completions", body) == estimate + 30
    assert request_token_floor("completions", body) == estimate + 3
    assert request_token_floor("embeddings", body) == 1


def test_fitting_writes_every_length_field_down_to_what_the_reservation_leaves() -> None:
    payload = {
        "model": "m",
        "prompt": "x",
        "n_predict": -1,
        "max_completion_tokens": "4540",
        "min_tokens": 99,
    }
    body = _body(payload)
    estimate = -(-len(body.content) // 4)
    fitted = fit_output_to("completions", body, estimate + 12)
    assert fitted == payload | {
        "max_tokens": 12,
        "n_predict": 12,
        "max_completion_tokens": 12,
        "min_tokens": 12,
    }


def test_fitting_keeps_smaller_fields_and_shares_the_output_between_sequences() -> None:
    body = _body({"model": "m", "messages": [], "max_tokens": 3, "n": 2, "min_tokens": 1})
    assert fit_output_to("chat/completions", body, 10_000) is None  # already within the reservation
    estimate = -(-len(body.content) // 4)
    fitted = fit_output_to("chat/completions", body, estimate + 4)
    assert fitted is not None
    assert (fitted["max_tokens"], fitted["min_tokens"]) == (2, 1)


@pytest.mark.parametrize(("path", "field"), [("responses", "max_output_tokens"), ("messages", "max_tokens")])
def test_fitting_adds_the_endpoints_own_length_field(path: str, field: str) -> None:
    body = _body({"model": "m", "input": "x"})
    fitted = fit_output_to(path, body, -(-len(body.content) // 4) + 7)
    assert fitted is not None
    assert fitted[field] == 7


def test_fitting_leaves_endpoints_that_generate_nothing_and_non_json_bodies_alone() -> None:
    assert fit_output_to("embeddings", _body({"model": "m", "input": "x", "max_tokens": 9}), 1) is None
    assert fit_output_to("chat/completions", RequestBody(b"--x\r\n", "m"), 1) is None


@given(
    st.dictionaries(
        st.sampled_from(["max_tokens", "max_completion_tokens", "n_predict", "min_tokens", "n", "best_of"]),
        st.none() | st.integers(-5, 10_000) | st.text(max_size=3) | st.booleans(),
    ),
    st.integers(0, 5_000),
)
def test_a_fitted_request_never_asks_for_more_than_it_reserved(fields: dict[str, Any], spare: int) -> None:
    body = _body({"model": "m", "prompt": "hello", **fields})
    reserved = request_token_floor("completions", body) + spare
    fitted = fit_output_to("completions", body, reserved) or body.json
    assert fitted is not None
    # What any engine could read as the output length, times the sequences, fits the reservation
    # (the prompt estimate is of the body as the client sent it).
    lengths = [
        fitted[name] for name in ("max_tokens", "max_completion_tokens", "n_predict") if name in fitted
    ]
    counts = [fields.get(name) for name in ("n", "best_of")]
    sequences = max((count for count in counts if isinstance(count, int) and _is_count(count)), default=1)
    assert lengths
    assert all(isinstance(length, int) and length > 0 for length in lengths)
    assert -(-len(body.content) // 4) + sequences * max(lengths) <= reserved
    assert fitted.get("min_tokens", 0) <= max(lengths)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
