"""The workload presets: the spec's weights and guards, the score's properties, the tool-call schemas."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirbad_orchestration.benchmarks import (
    COMPONENTS,
    PRESET_TOOL_CASES,
    WORKLOAD_PRESETS,
    WORKLOADS,
    GuardInputs,
    check_embeddings,
    check_guards,
    check_tool_call,
    is_pooling,
    preset_guards,
    preset_levels,
    reranker_reason,
    score_components,
    score_run,
    workload_preset,
)
from mirbad_orchestration.exceptions import RejectedMeasurementError, UnknownPresetError
from mirbad_protocol.benchmarks import PresetSizes, SloGuards

POSITIVE = st.floats(min_value=1e-3, max_value=1e6, allow_nan=False, allow_infinity=False)
KEYS = ("a", "b", "c", "d")


@st.composite
def sides(draw: st.DrawFn) -> tuple[dict[str, float], dict[str, float], dict[str, float], frozenset[str]]:
    """Weights, a candidate, a baseline (all over KEYS) and the latency keys."""
    weights = {key: draw(st.floats(min_value=0.01, max_value=10)) for key in KEYS}
    candidate = {key: draw(POSITIVE) for key in KEYS}
    baseline = {key: draw(POSITIVE) for key in KEYS}
    latencies = frozenset(draw(st.sets(st.sampled_from(KEYS))))
    return weights, candidate, baseline, latencies


def test_the_presets_are_the_spec_s_with_its_weights() -> None:
    weights = {name: dict(preset.weights) for name, preset in WORKLOAD_PRESETS.items()}

    assert [preset.label for preset in WORKLOAD_PRESETS.values()] == [
        "Interactive chat",
        "Agents & tools",
        "Throughput / batch",
        "Long documents",
        "Embeddings",
    ]
    assert weights == {
        "interactive": {"short_n1_tok_s": 0.5, "short_n16_tok_s": 0.2, "cold_16k_ttft_s": 0.3},
        "agents": {
            "short_n1_tok_s": 0.25,
            "short_n16_tok_s": 0.3,
            "cold_16k_ttft_s": 0.15,
            "shared_prefix_ttft_s": 0.3,
        },
        "throughput": {"short_n16_tok_s": 0.4, "short_max_seqs_tok_s": 0.6},
        "long-documents": {"short_n1_tok_s": 0.3, "cold_16k_ttft_s": 0.35, "cold_64k_ttft_s": 0.35},
        "embeddings": {"embed_n1_input_tok_s": 0.4, "embed_n16_input_tok_s": 0.6},
    }
    for preset in WORKLOAD_PRESETS.values():
        assert math.isclose(math.fsum(preset.weights.values()), 1.0)
        assert set(preset.weights) <= set(COMPONENTS)
        assert set(preset.workloads) <= set(WORKLOADS)
    assert [name for name, preset in WORKLOAD_PRESETS.items() if preset.pooling] == ["embeddings"]


def test_the_guards_per_preset_are_the_spec_s() -> None:
    agents = WORKLOAD_PRESETS["agents"].guards
    assert (agents.short_ttft_p95_n1_s, agents.short_ttft_p95_n16_s, agents.long_ttft_vs_baseline) == (
        1.0,
        3.0,
        1.25,
    )
    assert agents.max_error_rate == 0
    assert agents.objective_at_least_baseline
    assert agents.tool_validity
    assert not WORKLOAD_PRESETS["interactive"].guards.tool_validity
    throughput = WORKLOAD_PRESETS["throughput"].guards
    assert throughput.short_ttft_p95_n1_s is None
    assert throughput.short_ttft_p95_n16_s is None
    assert throughput.long_ttft_vs_baseline is None
    assert throughput.max_error_rate == 0
    embeddings = WORKLOAD_PRESETS["embeddings"].guards
    assert embeddings.valid_vectors
    assert embeddings.unchanged_normalization
    assert embeddings.embedding_latency_p95_n16_vs_baseline == 2.0
    assert not embeddings.objective_at_least_baseline


def test_a_job_overrides_only_the_guards_it_sets() -> None:
    preset = WORKLOAD_PRESETS["interactive"]

    guards = preset_guards(preset, SloGuards.model_validate({"shortTtftP95N1S": 2.5}))

    assert guards.short_ttft_p95_n1_s == 2.5
    assert guards.short_ttft_p95_n16_s == 3.0
    assert guards.objective_at_least_baseline
    assert preset_guards(preset, None) == preset.guards


def test_an_unknown_preset_names_the_presets() -> None:
    with pytest.raises(UnknownPresetError) as raised:
        workload_preset("fastest")

    assert raised.value.field == "preset"
    assert "interactive, agents, throughput, long-documents, embeddings" in str(raised.value)


@given(sides(), st.sampled_from(KEYS), st.floats(min_value=1.01, max_value=100))
def test_the_score_is_monotone_in_each_ratio(
    drawn: tuple[dict[str, float], dict[str, float], dict[str, float], frozenset[str]],
    key: str,
    factor: float,
) -> None:
    weights, candidate, baseline, latencies = drawn
    before = score_components(weights, candidate, baseline, lower_is_better=latencies).score
    # Better on one component: more of a rate, less of a latency.
    improved = candidate[key] / factor if key in latencies else candidate[key] * factor
    after = score_components(weights, candidate | {key: improved}, baseline, lower_is_better=latencies)

    assert after.score >= before * (1 - 1e-9)


@given(sides(), st.floats(min_value=1e-3, max_value=1e3))
def test_the_score_does_not_change_when_every_weight_is_scaled(
    drawn: tuple[dict[str, float], dict[str, float], dict[str, float], frozenset[str]], scale: float
) -> None:
    weights, candidate, baseline, latencies = drawn
    scaled = {key: weight * scale for key, weight in weights.items()}

    plain = score_components(weights, candidate, baseline, lower_is_better=latencies).score
    assert math.isclose(
        score_components(scaled, candidate, baseline, lower_is_better=latencies).score, plain, rel_tol=1e-9
    )


@given(sides(), st.sets(st.sampled_from(KEYS), min_size=1, max_size=3), st.booleans())
def test_components_missing_on_either_side_drop_out_and_the_rest_are_renormalized(
    drawn: tuple[dict[str, float], dict[str, float], dict[str, float], frozenset[str]],
    missing: set[str],
    from_candidate: bool,
) -> None:
    weights, candidate, baseline, latencies = drawn
    kept = [key for key in KEYS if key not in missing]
    if from_candidate:
        candidate = {key: candidate[key] for key in kept}
    else:
        baseline = {key: baseline[key] for key in kept}

    scored = score_components(weights, candidate, baseline, lower_is_better=latencies)
    only_kept = score_components(
        {key: weights[key] for key in kept}, candidate, baseline, lower_is_better=latencies
    )

    assert math.isclose(scored.score, only_kept.score, rel_tol=1e-9)
    assert sorted(scored.unmeasured) == sorted(missing)
    assert math.isclose(math.fsum(part.weight for part in scored.components), 1.0)


@given(sides(), st.floats(min_value=0.01, max_value=100))
def test_a_uniform_ratio_is_the_score_and_the_baseline_scores_one(
    drawn: tuple[dict[str, float], dict[str, float], dict[str, float], frozenset[str]], ratio: float
) -> None:
    weights, _, baseline, latencies = drawn
    candidate = {key: value / ratio if key in latencies else value * ratio for key, value in baseline.items()}

    assert math.isclose(
        score_components(weights, candidate, baseline, lower_is_better=latencies).score, ratio, rel_tol=1e-9
    )
    assert math.isclose(score_components(weights, baseline, baseline, lower_is_better=latencies).score, 1.0)


def test_latencies_are_inverted_in_a_preset_score() -> None:
    interactive = WORKLOAD_PRESETS["interactive"]
    baseline = {"short_n1_tok_s": 50.0, "short_n16_tok_s": 400.0, "cold_16k_ttft_s": 2.0}

    # Twice the speed everywhere and half the TTFT: twice as good on every component.
    faster = {"short_n1_tok_s": 100.0, "short_n16_tok_s": 800.0, "cold_16k_ttft_s": 1.0}
    assert math.isclose(score_run(interactive, faster, baseline).score, 2.0)
    # A 64K prompt that did not fit on either side is no component; N1 alone, then by the weights.
    slower_prefill = baseline | {"cold_16k_ttft_s": 4.0}
    expected = math.exp(0.3 * math.log(0.5))
    assert math.isclose(score_run(interactive, slower_prefill, baseline).score, expected)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("side", ["candidate", "baseline"])
def test_a_non_finite_or_non_positive_measurement_rejects_the_run(bad: float, side: str) -> None:
    good = {"a": 1.0, "b": 2.0}
    spoiled = good | {"b": bad}
    candidate, baseline = (spoiled, good) if side == "candidate" else (good, spoiled)

    with pytest.raises(RejectedMeasurementError) as raised:
        score_components({"a": 0.5, "b": 0.5}, candidate, baseline)

    assert (raised.value.component, raised.value.side) == ("b", side)


def test_nothing_measured_on_both_sides_rejects_the_run() -> None:
    with pytest.raises(RejectedMeasurementError, match="no score component"):
        score_components({"a": 1.0}, {"b": 1.0}, {"a": 1.0})


BASELINE = GuardInputs(
    short_ttft_p95_n1_s=0.2,
    short_ttft_p95_n16_s=1.0,
    long_ttft_s={16_384: 2.0},
    requests=40,
    objective_correct=6,
    tool_calls=3,
    tool_calls_valid=3,
    vectors_valid=True,
    unit_length=True,
    embedding_latency_p95_n16_s=0.5,
)
EVERY_GUARD = SloGuards(
    short_ttft_p95_n1_s=1.0,
    short_ttft_p95_n16_s=3.0,
    long_ttft_vs_baseline=1.25,
    max_error_rate=0.0,
    objective_at_least_baseline=True,
    tool_validity=True,
    valid_vectors=True,
    unchanged_normalization=True,
    embedding_latency_p95_n16_vs_baseline=2.0,
)


def test_the_baseline_passes_its_own_guards() -> None:
    assert check_guards(EVERY_GUARD, BASELINE, BASELINE) == []


@pytest.mark.parametrize(
    ("change", "broken"),
    [
        ({"short_ttft_p95_n1_s": 1.5}, "TTFT p95 at N=1"),
        ({"short_ttft_p95_n16_s": 3.2}, "TTFT p95 at N=16"),
        ({"long_ttft_s": {16_384: 2.6}}, "cold 16384-token prompt"),
        ({"failed": 1}, "1 of 40 requests failed"),
        ({"objective_correct": 5}, "fewer than the baseline's 6"),
        ({"tool_calls_valid": 2}, "1 of 3 tool calls were invalid"),
        ({"vectors_valid": False}, "shape check"),
        ({"unit_length": False}, "normalization changed"),
        ({"embedding_latency_p95_n16_s": 1.1}, "embeddings latency"),
    ],
)
def test_each_guard_names_what_broke_it(change: dict[str, Any], broken: str) -> None:
    run = dataclasses.replace(BASELINE, **change)

    found = check_guards(EVERY_GUARD, run, BASELINE)

    assert len(found) == 1
    assert broken in found[0]
    assert check_guards(SloGuards(), run, BASELINE) == []  # every guard off


@given(
    st.floats(min_value=0.001, max_value=10), st.floats(min_value=0.001, max_value=10), st.floats(0.01, 10)
)
def test_a_guard_that_a_run_passes_a_faster_run_passes_too(ttft: float, base: float, limit: float) -> None:
    guards = SloGuards(short_ttft_p95_n1_s=limit, long_ttft_vs_baseline=limit)
    baseline = GuardInputs(long_ttft_s={16_384: base})
    slower = GuardInputs(short_ttft_p95_n1_s=ttft * 2, long_ttft_s={16_384: ttft * 2})
    faster = GuardInputs(short_ttft_p95_n1_s=ttft, long_ttft_s={16_384: ttft})

    if not check_guards(guards, slower, baseline):
        assert check_guards(guards, faster, baseline) == []
    assert len(check_guards(guards, faster, baseline)) <= len(check_guards(guards, slower, baseline))


def test_a_non_finite_latency_breaks_its_guard() -> None:
    assert check_guards(EVERY_GUARD, GuardInputs(short_ttft_p95_n1_s=math.nan)) != []


def _tool_response(name: str, arguments: object) -> dict[str, object]:
    encoded = arguments if isinstance(arguments, str) else json.dumps(arguments)
    call = {"type": "function", "function": {"name": name, "arguments": encoded}}
    return {"choices": [{"message": {"role": "assistant", "tool_calls": [call]}}]}


@pytest.mark.parametrize(
    ("case", "arguments", "valid", "detail"),
    [
        (0, {"city": "Oslo", "unit": "celsius"}, True, ""),
        (0, {"city": "Oslo", "unit": "kelvin"}, False, "unit: 'kelvin' is not one of"),  # enum
        (0, {"city": "Oslo"}, False, "'unit' is a required property"),  # required
        (0, {"city": "Oslo", "unit": "celsius", "wind": True}, False, "Additional properties"),  # closed
        (1, {"title": "Ship the release", "tags": ["release", "urgent"]}, True, ""),
        (1, {"title": "Ship", "tags": ["release", 3]}, False, "tags/1: 3 is not of type"),  # items
        (1, {"title": "Ship", "tags": "release"}, False, "tags: 'release' is not of type 'array'"),  # type
        (2, {"people": 4, "slot": {"date": "2026-03-02", "start": "10:00", "end": "11:00"}}, True, ""),
        (2, {"people": 4, "slot": {"date": "d", "start": "s", "end": "e", "room": 1}}, False, "slot"),
        (2, "{not json", False, "not JSON"),
    ],
)
def test_tool_call_arguments_are_validated_against_the_tool_s_schema(
    case: int, arguments: object, valid: bool, detail: str
) -> None:
    tool = PRESET_TOOL_CASES[case]

    checked = check_tool_call(tool, _tool_response(tool.name, arguments))

    assert (checked.called, checked.valid) == (True, valid)
    assert detail in checked.detail


def test_a_reply_without_the_tool_call_is_not_valid() -> None:
    tool = PRESET_TOOL_CASES[0]

    assert not check_tool_call(tool, {"choices": [{"message": {"content": "It is sunny."}}]}).called
    wrong = check_tool_call(tool, _tool_response("get_time", {}))
    assert wrong.called
    assert not wrong.valid
    assert "unknown tool" in wrong.detail
    assert tool.request()["tools"][0]["function"]["parameters"]["additionalProperties"] is False


@pytest.mark.parametrize(
    ("argv", "tags", "pooling"),
    [
        (["--runner", "pooling"], (), True),
        (["--convert=embed"], (), True),
        (["--task", "embed"], (), True),
        (["-m", "x.gguf", "--embeddings", "--pooling", "mean"], (), True),
        (["--max-num-seqs", "16"], ("embedding",), True),
        (["--max-num-seqs", "16"], (), False),
        (["--task", "generate"], (), False),
        (["--convert", "classify"], (), False),  # a reranker is not an embedding model
    ],
)
def test_pooling_models_are_told_from_their_launch_and_tags(
    argv: list[str], tags: tuple[str, ...], pooling: bool
) -> None:
    assert is_pooling(argv, tags) is pooling


@pytest.mark.parametrize(
    ("argv", "tags", "named"),
    [
        (["--convert", "classify"], (), "--convert classify"),
        (["--task=score"], (), "--task score"),
        (["--reranking"], (), "--reranking"),
        ([], ("reranker",), "the reranker tag"),
    ],
)
def test_rerankers_are_refused_saying_why(argv: list[str], tags: tuple[str, ...], named: str) -> None:
    reason = reranker_reason(argv, tags)

    assert reason is not None
    assert named in reason
    assert "nothing the benchmark suites can measure" in reason
    assert reranker_reason(["--task", "embed"], ("embedding",)) is None


def test_the_short_chat_levels_add_max_num_seqs_capped() -> None:
    sizes = PresetSizes()

    assert preset_levels(sizes, 128) == ([1, 16, 64], 64, "")
    assert preset_levels(sizes, 16) == ([1, 16], 16, "")
    assert preset_levels(sizes, None)[1] is None


def _vectors(*vectors: list[float]) -> dict[str, object]:
    return {"data": [{"embedding": vector} for vector in vectors]}


@pytest.mark.parametrize(
    ("document", "inputs", "problem"),
    [
        (_vectors([0.6, 0.8], [1.0, 0.0]), 2, ""),
        (_vectors([0.6, 0.8]), 2, "1 vectors for 2 inputs"),
        (_vectors([0.6, 0.8], [1.0]), 2, "2 different dimensions"),
        (_vectors([0.0, 0.0], [1.0, 0.0]), 2, "all zeros"),
        (_vectors([math.nan, 1.0], [1.0, 0.0]), 2, "not a finite number"),
        (_vectors([], [1.0]), 2, "no vector"),
        ({"error": "nope"}, 1, "no vectors for 1 inputs"),
    ],
)
def test_the_embeddings_shape_check(document: dict[str, object], inputs: int, problem: str) -> None:
    found, dimension, unit = check_embeddings(document, inputs)

    assert problem in found
    assert bool(found) is bool(problem)
    if not problem:
        assert (dimension, unit) == (2, True)


def test_unit_length_is_reported() -> None:
    assert check_embeddings(_vectors([3.0, 4.0]), 1) == ("", 2, False)
