"""Nearest-rank percentiles and medians of the suites, and the suite's answer checks."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirbad_orchestration.benchmarks import OBJECTIVE_QUESTIONS, median, nearest_rank, score_tool_call

LATENCIES = st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), min_size=1, max_size=60)


@given(LATENCIES, st.floats(min_value=0.01, max_value=100))
def test_a_nearest_rank_percentile_is_a_measured_value_with_enough_values_below(
    values: list[float], percent: float
) -> None:
    picked = nearest_rank(values, percent)

    assert picked in values
    at_or_below = sum(value <= picked for value in values)
    assert at_or_below >= math.ceil(percent / 100 * len(values))
    below = sum(value < picked for value in values)
    assert below < math.ceil(percent / 100 * len(values))


@given(LATENCIES)
def test_the_median_lies_between_the_extremes(values: list[float]) -> None:
    assert min(values) <= median(values) <= max(values)


def test_nearest_rank_by_the_book() -> None:
    values = [0.3, 0.1, 0.2, 0.5, 0.4]
    assert nearest_rank(values, 50) == 0.3
    assert nearest_rank(values, 95) == 0.5
    assert nearest_rank([1.0] * 19 + [9.0], 95) == 1.0
    assert nearest_rank([1.0] * 19 + [9.0], 96) == 9.0


@pytest.mark.parametrize(("values", "percent"), [([], 50), ([1.0], 0), ([1.0], 101)])
def test_percentiles_of_nothing_or_out_of_range_are_refused(values: list[float], percent: float) -> None:
    with pytest.raises(ValueError, match=r"no values|percent"):
        nearest_rank(values, percent)


def _tool_response(name: str, arguments: str) -> dict[str, object]:
    call = {"type": "function", "function": {"name": name, "arguments": arguments}}
    return {"choices": [{"message": {"role": "assistant", "tool_calls": [call]}}]}


def test_tool_call_arguments_are_validated_against_a_schema_without_properties() -> None:
    assert score_tool_call(_tool_response("get_server_time", "{}")).valid
    assert score_tool_call(_tool_response("get_server_time", '{"zone": "UTC"}')).valid
    listed = score_tool_call(_tool_response("get_server_time", "[1, 2]"))
    assert (listed.called, listed.valid) == (True, False)
    assert "schema" in listed.detail
    broken = score_tool_call(_tool_response("get_server_time", "{nope"))
    assert "not JSON" in broken.detail
    assert not score_tool_call(_tool_response("other", "{}")).valid
    silent = score_tool_call({"choices": [{"message": {"content": "It is noon."}}]})
    assert (silent.called, silent.valid) == (False, False)


def test_there_are_eight_objective_questions_each_recognizing_its_answer() -> None:
    assert len(OBJECTIVE_QUESTIONS) == 8
    right = ["42", "72", "Paris.", "7", "Au", "Mercury", "25", "tac"]
    for question, answer in zip(OBJECTIVE_QUESTIONS, right, strict=True):
        assert question.is_answered_by(f"The answer is {answer}")
        assert not question.is_answered_by("I do not know")
