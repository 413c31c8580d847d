"""The workload-preset search on the simulator: the phases, the follow-ups, the refinement, Quick vs Full.

The performance model's optimum is known: FP8 KV, 32 sequences, MTP depth 3 with PIECEWISE graphs
(full graphs fail to start with an MTP depth of 2 or more, as an attention backend without full-graph
spec-decode support would), async scheduling on. Every candidate carries a goal and a tradeoff, its
start and benchmark seconds, and RuntimeNotes read from its (simulated) log.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mirbad_orchestration.benchmarks import GuardInputs, workload_preset
from mirbad_orchestration.exceptions import UnknownTuningStepError
from mirbad_orchestration.tuning import (
    AS_REQUESTED,
    GateInputs,
    Measurement,
    PresetScorer,
    PresetSimulatedRunner,
    TuningEngine,
    preset_plan,
)
from mirbad_protocol import ModelDefinition, SpeculativeDecoding

pytestmark = pytest.mark.anyio

SAVED = ModelDefinition(id="m", served_name="m", model_path="m", max_num_seqs=16, max_model_len=32768)
CONFIG = {"architectures": ["Qwen3NextForCausalLM"], "mtp_num_hidden_layers": 1}
GATES = GateInputs(config=CONFIG, mtp_architectures=("Qwen3NextMTP",))
INTERACTIVE = workload_preset("interactive")
GUARDS = GuardInputs(
    short_ttft_p95_n1_s=0.2, short_ttft_p95_n16_s=1.0, requests=100, failed=0, objective_correct=8
)
BASE = Measurement(
    single_tok_s=50.0, many_tok_s=400.0, single_ttft_p95_s=0.2, many_ttft_p95_s=1.0, guards=GUARDS
)
FULL_GRAPHS_FAIL = "full CUDA graphs are not supported with spec-decode"


def _depth(definition: ModelDefinition) -> int:
    spec = definition.speculative
    return spec.num_speculative_tokens or 0 if spec is not None else 0


def _seqs(seqs: int) -> float:
    return seqs / 16 if seqs <= 32 else 2 - (seqs - 32) / 64


def known_best(definition: ModelDefinition) -> Measurement | str:
    """The truth: see the module."""
    depth = _depth(definition)
    if depth >= 2 and definition.cudagraph_mode == "FULL_AND_PIECEWISE":
        return FULL_GRAPHS_FAIL
    n1 = 50.0 * (1 + 0.15 * min(depth, 3)) * (1.05 if definition.async_scheduling else 1.0)
    n16 = 400.0 * _seqs(definition.max_num_seqs) * (1 - 0.03 * depth)
    n16 *= 1.1 if definition.kv_cache_dtype == "fp8" else 1.0
    ttft = 2.0 * (0.9 if definition.kv_cache_dtype == "fp8" else 1.0)
    components = {"short_n1_tok_s": n1, "short_n16_tok_s": n16, "cold_16k_ttft_s": ttft}
    return replace(BASE, single_tok_s=n1, many_tok_s=n16, components=components)


def flat(definition: ModelDefinition) -> Measurement | str:
    """Noise alone."""
    components = {"short_n1_tok_s": 50.0, "short_n16_tok_s": 400.0, "cold_16k_ttft_s": 2.0}
    return replace(BASE, components=components)


def simulated_log(definition: ModelDefinition) -> list[str]:
    """What vLLM would print: MTP with full graphs downgraded to PIECEWISE, async as asked."""
    spec = definition.speculative
    text = (
        "None"
        if spec is None
        else f"SpeculativeConfig(method='mtp', model='m', num_spec_tokens={_depth(definition)})"
    )
    graph = definition.cudagraph_mode or "FULL_AND_PIECEWISE"
    lines = [
        "(EngineCore pid=7) INFO 12-01 10:00:00 [core.py:109] Initializing a V1 LLM engine (v0.20.2) with "
        f"config: model='m', speculative_config={text}, compilation_config={{'cudagraph_mode': "
        f"<CUDAGraphMode.{graph}: (2, 1)>}}",
        "(APIServer pid=1) INFO 12-01 10:00:00 [vllm.py:840] Asynchronous scheduling is "
        + ("disabled." if definition.async_scheduling is False else "enabled."),
    ]
    if spec is not None and graph == "FULL_AND_PIECEWISE":
        lines.append(
            "(EngineCore pid=7) WARNING 12-01 10:00:05 [compilation.py:1390] "
            "CUDAGraphMode.FULL_AND_PIECEWISE is not supported with spec-decode for attention "
            "backend FlashInferBackend; setting cudagraph_mode=PIECEWISE"
        )
    return lines


def test_the_full_plan_runs_the_phases_in_order_with_goals_and_tradeoffs() -> None:
    plan = preset_plan(SAVED, GATES, search="full")
    assert plan.steps == [
        "kv_prefix",
        "max_num_seqs",
        "max_num_batched_tokens",
        "speculative",
        "cudagraph_mode",
        "async_scheduling",
        "refine_max_num_seqs",
        "refine_speculative",
        "refine_prefix",
    ]
    by_step = {dimension.name: dimension for dimension in plan.dimensions}
    assert by_step["kv_prefix"].values == ("fp8/prefix-on", "fp8/prefix-off")  # KV auto: unknown
    assert by_step["max_num_seqs"].values == (4, 8, 16, 32, 64)
    assert by_step["speculative"].values == ("off", "mtp-1", "mtp-2", "mtp-3", "mtp-5")
    assert all(dimension.goal and dimension.tradeoff for dimension in plan.dimensions)
    goal, tradeoff = by_step["speculative"].sentences("mtp-3")
    assert "3 tokens" in goal
    assert tradeoff
    assert any("kv auto not tried" in note for note in plan.notes)


def test_quick_tries_max_num_seqs_and_speculative_with_their_refinements() -> None:
    plan = preset_plan(SAVED, GATES)
    assert plan.steps == ["max_num_seqs", "speculative", "refine_max_num_seqs", "refine_speculative"]
    # Without the cudagraph step, speculative candidates leave the graph mode alone.
    speculative = plan.dimensions[1]
    assert speculative.candidate(SAVED, "mtp-2").cudagraph_mode is None


def test_a_pooling_model_keeps_the_phase_a_plan() -> None:
    plan = preset_plan(SAVED, GateInputs(pooling=True), search="full")
    assert plan.steps == ["max_num_seqs", "max_num_batched_tokens"]
    with pytest.raises(UnknownTuningStepError):
        preset_plan(SAVED, GateInputs(pooling=True), steps=["speculative"])


def test_unknown_steps_are_all_named() -> None:
    with pytest.raises(UnknownTuningStepError) as raised:
        preset_plan(SAVED, GATES, steps=["max_num_seqs", "warp", "flux"])
    assert raised.value.unknown == ["warp", "flux"]


def test_a_mamba_hybrid_pairs_prefix_caching_with_its_cache_mode() -> None:
    gates = GateInputs(config={"hybrid_override_pattern": "M*M"}, kv_auto_fits=True)
    plan = preset_plan(SAVED, gates, steps=["kv_prefix"])
    kv_prefix = plan.dimensions[0]
    assert kv_prefix.values == ("fp8/prefix-on", "fp8/prefix-off", "auto/prefix-on", "auto/prefix-off")
    on = kv_prefix.candidate(SAVED, "auto/prefix-on")
    off = kv_prefix.candidate(SAVED, "fp8/prefix-off")
    assert (on.enable_prefix_caching, on.mamba_cache_mode, on.kv_cache_dtype) == (True, "align", "auto")
    assert (off.enable_prefix_caching, off.mamba_cache_mode) == (False, "none")


async def test_the_search_finds_the_known_best_and_the_confirmation_accepts_it() -> None:
    runner = PresetSimulatedRunner(known_best, noise=0.01, seed=3, log=simulated_log)
    engine = TuningEngine(runner, rng=random.Random(3), scorer=PresetScorer(INTERACTIVE))
    outcome = await engine.run(SAVED, preset_plan(SAVED, GATES, search="full"))

    best = outcome.winner_definition
    assert best is not None, outcome.notes
    assert best.speculative == SpeculativeDecoding(method="mtp", num_speculative_tokens=3)
    assert (best.cudagraph_mode, best.max_num_seqs, best.kv_cache_dtype) == ("PIECEWISE", 32, "fp8")
    assert best.async_scheduling is True
    assert runner.live == []
    assert runner.restored

    rows = {(row.step, str(next(iter(row.changes.values()), ""))): row for row in outcome.candidates}
    # Full graphs with depth >= 2 fail alone; each failed depth and the best two get a PIECEWISE try.
    assert rows["speculative", "mtp-3"].outcome == "failed"
    assert rows["speculative", "mtp-3"].error == FULL_GRAPHS_FAIL
    assert rows["speculative", "mtp-1"].outcome == "accepted"
    follow_ups = [row.changes["cudagraph_mode"] for row in outcome.candidates if row.step == "cudagraph_mode"]
    assert follow_ups == ["mtp-1", "mtp-2", "mtp-3", "mtp-5"]
    # The refinement: the neighbours of 32 seqs and of depth 3.
    refined = [row.changes for row in outcome.candidates if row.step.startswith("refine_")]
    assert {"refine_max_num_seqs": 24} in refined
    assert {"refine_max_num_seqs": 48} in refined
    assert {"refine_speculative": "mtp-4"} in refined

    measured = [row for row in outcome.candidates if row.outcome in ("accepted", "rejected")]
    assert all(row.goal and row.tradeoff for row in outcome.candidates if row.step != "baseline")
    assert all(row.start_seconds is not None and row.benchmark_seconds is not None for row in measured)
    # RuntimeNotes: the full-graph MTP candidate was downgraded; the PIECEWISE one ran as requested.
    assert rows["speculative", "mtp-1"].runtime_notes[0] == (
        "cudagraph_mode PIECEWISE (requested FULL_AND_PIECEWISE)"
    )
    assert rows["cudagraph_mode", "mtp-3"].runtime_notes == [AS_REQUESTED]
    assert outcome.winner is not None
    assert outcome.winner.step == "confirmation"


@settings(max_examples=5, deadline=None)
@given(st.integers(min_value=0, max_value=10_000))
def test_on_noise_alone_the_baseline_is_kept(seed: int) -> None:
    import anyio

    runner = PresetSimulatedRunner(flat, noise=0.02, seed=seed, log=simulated_log)
    engine = TuningEngine(runner, rng=random.Random(seed), scorer=PresetScorer(INTERACTIVE))
    outcome = anyio.run(engine.run, SAVED, preset_plan(SAVED, GATES))
    assert outcome.winner_definition is None
    assert runner.live == []


async def test_a_failing_candidate_fails_only_itself() -> None:
    def broken_at_8(definition: ModelDefinition) -> Measurement | str:
        return "out of memory" if definition.max_num_seqs == 8 else known_best(definition)

    runner = PresetSimulatedRunner(broken_at_8, seed=4, log=simulated_log)
    engine = TuningEngine(runner, rng=random.Random(4), scorer=PresetScorer(INTERACTIVE))
    outcome = await engine.run(SAVED, preset_plan(SAVED, GATES))
    failed = [row for row in outcome.candidates if row.outcome == "failed"]
    assert [(row.step, row.error) for row in failed if row.error == "out of memory"] == [
        ("max_num_seqs", "out of memory")
    ]
    assert outcome.winner_definition is not None
    assert outcome.winner_definition.max_num_seqs == 32
    assert runner.live == []


async def test_a_baseline_breaking_an_absolute_preset_guard_makes_it_relative() -> None:
    slow = replace(GUARDS, short_ttft_p95_n1_s=1.5)

    def slow_everywhere(definition: ModelDefinition) -> Measurement | str:
        truth = known_best(definition)
        return truth if isinstance(truth, str) else replace(truth, guards=slow)

    runner = PresetSimulatedRunner(slow_everywhere, seed=5)
    engine = TuningEngine(runner, rng=random.Random(5), scorer=PresetScorer(INTERACTIVE))
    outcome = await engine.run(SAVED, preset_plan(SAVED, GATES, steps=["max_num_seqs"]))
    assert "guard short_ttft_p95_n1_s made relative: the baseline breaks it" in outcome.notes
    assert outcome.winner_definition is not None
    assert outcome.winner_definition.max_num_seqs == 32


async def test_cancel_while_measuring_still_removes_the_instance_whose_log_is_read() -> None:
    import anyio

    measuring = anyio.Event()

    class Slow(PresetSimulatedRunner):
        async def measure(self, handle: str) -> Measurement:
            measuring.set()
            await anyio.sleep_forever()
            raise AssertionError("never measured")

        async def log(self, handle: str) -> list[str]:
            await anyio.lowlevel.checkpoint()  # a real log read checkpoints (an HTTP call through the agent)
            return await super().log(handle)

    runner = Slow(known_best, log=simulated_log)
    engine = TuningEngine(runner, scorer=PresetScorer(INTERACTIVE))
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(engine.run, SAVED, preset_plan(SAVED, GATES))
            await measuring.wait()
            tasks.cancel_scope.cancel()
    assert runner.live == []
    assert runner.restored


async def test_the_progress_hears_of_every_candidate_with_its_goal_the_confirmation_too() -> None:
    heard: list[tuple[str, str, int, str]] = []

    async def progress(
        phase: str, description: str, done: int, *, goal: str = "", tradeoff: str = ""
    ) -> None:
        heard.append((phase, description, done, goal))

    runner = PresetSimulatedRunner(known_best, seed=6)
    engine = TuningEngine(runner, rng=random.Random(6), scorer=PresetScorer(INTERACTIVE), progress=progress)
    outcome = await engine.run(SAVED, preset_plan(SAVED, GATES, steps=["max_num_seqs"]))

    phases = [phase for phase, *_ in heard]
    assert phases[0] == "baseline"
    assert phases.count("confirmation") == len(outcome.confirmation) == 3
    assert all(goal for phase, _, _, goal in heard if phase == "search")
    dones = [done for *_, done, _ in heard]
    assert dones == sorted(dones)  # the ETA is re-projected from a count that only grows


def test_a_draft_model_tries_its_depths_and_refines_within_the_drafters_block_size() -> None:
    spec = SpeculativeDecoding(method="eagle3", model="org/drafter", num_speculative_tokens=7)
    saved = SAVED.model_copy(update={"speculative": spec})
    plan = preset_plan(saved, GateInputs(drafter_config={"block_size": 8}))
    by_step = {dimension.name: dimension for dimension in plan.dimensions}
    assert by_step["speculative"].values == ("off", "saved", "draft-3", "draft-7")
    assert any("[11] not tried: over the drafter's block size 8" in note for note in plan.notes)
    drafted = by_step["speculative"].candidate(saved, "draft-3")
    assert drafted.speculative == spec.model_copy(update={"num_speculative_tokens": 3})
    assert by_step["refine_speculative"].values_for([], saved) == ("draft-6", "draft-8")
    capped = saved.model_copy(update={"speculative": spec.model_copy(update={"num_speculative_tokens": 8})})
    assert by_step["refine_speculative"].values_for([], capped) == ("draft-7",)


async def test_a_non_positive_component_rejects_the_candidate() -> None:
    def broken_at_32(definition: ModelDefinition) -> Measurement | str:
        truth = known_best(definition)
        if isinstance(truth, str) or definition.max_num_seqs != 32:
            return truth
        return replace(truth, components={**truth.components, "short_n16_tok_s": 0.0})

    runner = PresetSimulatedRunner(broken_at_32, seed=8)
    engine = TuningEngine(runner, rng=random.Random(8), scorer=PresetScorer(INTERACTIVE))
    outcome = await engine.run(SAVED, preset_plan(SAVED, GATES, steps=["max_num_seqs"]))
    [row] = [row for row in outcome.candidates if row.changes == {"max_num_seqs": 32}]
    assert row.outcome == "rejected"
    assert row.score == 0.0
    assert any("short_n16_tok_s" in broken for broken in row.guard_violations)
    assert outcome.winner_definition is None or outcome.winner_definition.max_num_seqs != 32


def test_the_registrys_tags_stand_in_for_a_config_json() -> None:
    hybrid = preset_plan(SAVED, GateInputs(tags=("hybrid",)), steps=["kv_prefix"]).dimensions[0]
    assert hybrid.candidate(SAVED, "fp8/prefix-on").mamba_cache_mode == "align"
    assert hybrid.candidate(SAVED, "fp8/prefix-off").mamba_cache_mode == "none"
    dense = GateInputs(weights_bytes=64 * 10**9, weights_format="bf16")
    assert preset_plan(SAVED, dense, steps=["max_num_seqs"]).dimensions[0].values[:2] == (1, 2)
    moe = GateInputs(weights_bytes=64 * 10**9, weights_format="bf16", tags=("moe",))
    assert preset_plan(SAVED, moe, steps=["max_num_seqs"]).dimensions[0].values[0] == 4


def test_a_plan_without_speculative_depths_carries_no_speculative_note() -> None:
    plain = GateInputs(config={"architectures": ["LlamaForCausalLM"]})  # no MTP layers: a note if asked

    assert preset_plan(SAVED, plain, steps=["async_scheduling"]).notes == ()
    assert any(
        note.startswith("speculative:") for note in preset_plan(SAVED, plain, steps=["speculative"]).notes
    )
