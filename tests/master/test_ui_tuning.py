"""The portal's Tuning view in NiceGUI's simulation, over a real master whose candidates the simulator runs.

The master and its tuning jobs are real (:func:`running_master` over a fake agent); the candidate
runner is the API tests' :class:`SimulatedRunner` with a known best at 32 max num seqs, so the view's
plan, progress, results, plot, Apply best and refusals are tested without a model server (the
browser tier runs a real llama-server tuning: ``tests/browser/test_tuning.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import anyio
import pytest
from nicegui import ui
from nicegui.testing.user import User
from tests._support.polling import eventually
from tests.master._stack import Master, running_master
from tests.master.test_api_benchmarks import QWEN, WAIT_S, chatty, ready
from tests.master.test_api_tuning import Runners, preset_truth
from tests.master.test_ui_pages import portal_user
from tests.orchestration.test_tuning_runtime_notes import SCHEDULED

from mirbad_master.tuning.page import chart_options, score_text
from mirbad_orchestration.jobs import JobTarget
from mirbad_orchestration.tuning import (
    PRESET_STEPS,
    CandidateRunner,
    EtaBasis,
    EtaProjection,
    PresetSimulatedRunner,
    plan_for,
    planned_seconds,
)
from mirbad_protocol import ModelDefinition
from mirbad_protocol.tuning import TuningCandidate, TuningRun

pytestmark = pytest.mark.anyio

_until = partial(eventually, timeout_s=WAIT_S)


@pytest.fixture
def runners() -> Runners:
    return Runners()


@pytest.fixture
async def master(tmp_path: Path, runners: Runners) -> AsyncIterator[Master]:
    options = {"tuning_runners": runners, "tuning_repetitions": (2, 3)}
    async with running_master(tmp_path, agent=chatty, services_options=options) as master:
        yield master


def _elements(user: User, marker: str) -> set[ui.element]:
    try:
        return user.find(marker=marker).elements
    except AssertionError:  # User.find says "not on the page" so; the page is polled until it is
        return set()


def _text(user: User, marker: str) -> str:
    found = [element for element in _elements(user, marker) if isinstance(element, ui.label)]
    return found[0].text if found else ""


def _table(user: User, marker: str) -> ui.table | None:
    found = [element for element in _elements(user, marker) if isinstance(element, ui.table)]
    return found[0] if found else None


def _select(user: User, marker: str) -> ui.select:
    (element,) = user.find(marker=marker).elements
    assert isinstance(element, ui.select)
    return element


async def test_the_plan_preview_lists_the_engines_steps_with_goal_tradeoff_and_eta(master: Master) -> None:
    async with portal_user(master) as user:
        await master.admin.post("/api/models", json=QWEN)
        await user.open("/models/qwen/tuning")
        quick = _table(user, "tuning-plan")
        assert quick is not None
        quick_steps = [row["step"] for row in quick.rows]
        quick_eta = _text(user, "tuning-eta")
        _select(user, "tuning-search").set_value("full")
        await _until(lambda: len(getattr(_table(user, "tuning-plan"), "rows", [])) > len(quick_steps))
        full = _table(user, "tuning-plan")
        assert full is not None
        await user.should_see("speculative: MTP not tried (the model has no MTP layers)")
        _select(user, "tuning-steps").set_value(["max_num_batched_tokens"])
        await _until(lambda: len(getattr(_table(user, "tuning-plan"), "rows", [])) == 1)
        only = _table(user, "tuning-plan")
        assert only is not None

    definition = ModelDefinition.model_validate(QWEN)
    assert quick_steps == plan_for(definition, search="quick").steps == ["speculative", "max_num_seqs"]
    assert [row["step"] for row in full.rows] == plan_for(definition, search="full").steps
    assert [row["step"] for row in only.rows] == ["max_num_batched_tokens"]
    seqs = next(row for row in quick.rows if row["step"] == "max_num_seqs")
    assert seqs == {
        "step": "max_num_seqs",
        "values": "max_num_seqs = 8, max_num_seqs = 16, max_num_seqs = 32",
        "goal": "more parallel requests",
        "tradeoff": "KV memory",
    }
    # No run yet: the defaults, at this master's repetitions (2 in the search, 3 to confirm).
    eta_s = EtaProjection(
        EtaBasis(), plan_for(definition).candidates, repetitions=2, confirm_repetitions=3
    ).planned()
    assert eta_s < planned_seconds(plan_for(definition, search="quick"))  # the product's 3 and 5
    assert quick_eta.startswith(f"{plan_for(definition).candidates + 4} candidates")
    assert f"about {round(eta_s / 60)} min" in quick_eta
    assert "a first guess: nothing was measured on this model yet" in quick_eta


async def test_a_run_from_the_page_shows_progress_results_the_plot_and_applies_the_best(
    master: Master, runners: Runners
) -> None:
    await ready(master, QWEN)
    models_file = master.services.settings.data_dir / "models.json"
    async with portal_user(master) as user:
        await user.open("/models/qwen/tuning")
        await user.should_see("No tuning run yet.")
        _select(user, "tuning-goal").set_value("many-agents")
        runners.hold = anyio.Event()
        before = models_file.read_bytes()
        user.find(marker="tuning-run").click()
        with anyio.fail_after(WAIT_S):
            await runners.measuring.wait()
        await _until(lambda: _text(user, "tuning-status").startswith("running: baseline"))
        live = _text(user, "tuning-status")
        runners.hold.set()
        await _until(lambda: "best:" in _text(user, "tuning-winner"))
        during = models_file.read_bytes()
        winner = _text(user, "tuning-winner")
        (chart,) = user.find(marker="tuning-chart").elements
        assert isinstance(chart, ui.echart)
        table = _table(user, "tuning-candidates")
        assert table is not None
        rows = table.rows
        user.find(marker="tuning-apply").click()
        await user.should_see("Restart qwen?")
        await user.should_see("maxNumSeqs: 16 -> 32")
        saved = (await master.admin.get("/api/models/qwen")).json()
        audit = await master.services.audit.read(datetime.now(UTC).date())

    assert "candidates" in live
    assert "left" in live
    assert during == before  # the run never touched the registry
    assert "Many agents" in winner
    assert "max-num-seqs=32" in winner
    series = {item["name"]: item for item in chart.options["series"]}
    assert series["median"]["markLine"]["data"] == [{"yAxis": 1.0}]
    assert chart.options["xAxis"]["data"][0] == "baseline"
    assert [row["stage"] for row in rows][:1] == ["search"]
    assert "confirmation" in [row["stage"] for row in rows]
    assert rows[0]["candidate"] == "baseline"
    assert rows[0]["config"].startswith("max-num-seqs=16")
    assert " to " in rows[0]["score"]
    assert saved["definition"]["maxNumSeqs"] == 32
    assert saved["restartPending"] is True
    actions = [entry.action for entry in audit]
    assert "model.tune" in actions
    assert "model.tune.apply" in actions


async def test_refusals_and_cancel_are_messages_not_crashes(master: Master, runners: Runners) -> None:
    async with portal_user(master) as user:
        await master.admin.post("/api/models", json=QWEN)
        await user.open("/models/qwen/tuning")
        user.find(marker="tuning-run").click()
        await _until(lambda: "not Ready" in _text(user, "tuning-message"))
        refused = _text(user, "tuning-message")
        (await master.admin.post("/api/models/qwen/start")).raise_for_status()
        runners.hold = anyio.Event()
        user.find(marker="tuning-run").click()
        with anyio.fail_after(WAIT_S):
            await runners.measuring.wait()
        second = await master.admin.post("/api/models/qwen/benchmark")
        user.find(marker="tuning-cancel").click()
        await _until(lambda: _text(user, "tuning-status").startswith("cancelled"))
        await user.should_see("cancelled")

    assert refused
    assert second.status_code == 409


def test_the_score_and_its_range_read_as_one_cell_and_an_unmeasured_candidate_is_not_plotted() -> None:
    measured = TuningCandidate(
        step="max_num_seqs", description="max_num_seqs = 32", score=1.2, score_min=1.1, score_max=1.3
    )
    failed = TuningCandidate(
        step="max_num_seqs", description="max_num_seqs = 64", outcome="failed", error="OOM"
    )
    run = TuningRun(
        model_id="m",
        node_id="n",
        runtime="vllm",
        goal="balanced",
        started_at=datetime(2026, 1, 1, tzinfo=UTC),
        candidates=[
            TuningCandidate(step="baseline", score=1.0, score_min=0.98, score_max=1.02),
            measured,
            failed,
        ],
        confirmation=[measured.model_copy(update={"score": 1.1, "score_min": 1.05, "score_max": 1.15})],
    )

    options = chart_options(run)

    assert score_text(measured) == "1.200 (1.100 to 1.300)"
    assert score_text(failed) == ""
    assert options["xAxis"]["data"] == ["baseline", "max_num_seqs = 32", "confirm: max_num_seqs = 32"]
    low, spread, median = options["series"]
    assert low["data"] == [0.98, 1.1, 1.05]
    assert spread["data"] == pytest.approx([0.04, 0.2, 0.1])
    assert [point["value"] for point in median["data"]] == [1.0, 1.2, 1.1]


async def test_the_tuning_view_is_linked_from_the_model_card_and_every_button_has_a_name(
    master: Master,
) -> None:
    async with portal_user(master) as user:
        await master.admin.post("/api/models", json=QWEN)
        await user.open("/models")
        (link,) = user.find(marker="tuning-qwen").elements
        await user.open("/models/qwen/tuning")
        buttons = [element for element in user.find(ui.button).elements if isinstance(element, ui.button)]

    assert link.props["href"] == "/models/qwen/tuning"
    assert buttons
    assert [button for button in buttons if not (button.text or button.props.get("aria-label"))] == []


@pytest.fixture
async def preset_master(tmp_path: Path) -> AsyncIterator[Master]:
    """Candidates from the preset simulator, with a log whose MTP line differs from no request."""

    async def runners(target: JobTarget, saved: ModelDefinition) -> CandidateRunner:
        return PresetSimulatedRunner(preset_truth, noise=0.005, seed=11, log=lambda _: [SCHEDULED])

    options = {"tuning_runners": runners, "tuning_repetitions": (2, 3)}
    async with running_master(tmp_path, agent=chatty, services_options=options) as master:
        yield master


async def test_a_preset_run_shows_its_steps_eta_goals_and_runtime_notes(preset_master: Master) -> None:
    master = preset_master
    await ready(master, QWEN)
    async with portal_user(master) as user:
        await user.open("/models/qwen/tuning")
        _select(user, "tuning-preset").set_value("throughput")
        await _until(
            lambda: (
                "refine_max_num_seqs" in [r["step"] for r in getattr(_table(user, "tuning-plan"), "rows", [])]
            )
        )
        plan = _table(user, "tuning-plan")
        assert plan is not None
        eta = _text(user, "tuning-eta")
        offered = list(_select(user, "tuning-steps").options)
        user.find(marker="tuning-run").click()
        await _until(lambda: "best:" in _text(user, "tuning-winner"))
        winner = _text(user, "tuning-winner")
        table = _table(user, "tuning-candidates")
        assert table is not None
        rows = table.rows
        # Opened again after the run, the preview's estimate is made of that run's measured pace.
        await user.open("/models/qwen/tuning")
        _select(user, "tuning-preset").set_value("throughput")
        await _until(lambda: "from the last runs' pace" in _text(user, "tuning-eta"))
        measured_eta = _text(user, "tuning-eta")

    assert [row["step"] for row in plan.rows] == ["max_num_seqs", "speculative", "refine_max_num_seqs"]
    refine = plan.rows[-1]
    assert refine["values"].endswith("(decided by the run so far)")
    assert refine["goal"]
    assert refine["tradeoff"]
    assert "candidates with the baseline and the confirmation stage" in eta
    assert "a first guess" in eta  # before any run
    # The stand-in runners' starts are measured; their benchmarks take no time, so that part stays a guess.
    assert "from the last runs' pace: starts of recent runs" in measured_eta
    assert "nothing was measured" not in measured_eta
    assert offered == list(PRESET_STEPS)
    assert "Throughput / batch" in winner
    searched = [row for row in rows if row["stage"] == "search" and row["candidate"] != "baseline"]
    assert all(" / " in row["why"] for row in searched if row["outcome"] != "duplicate")
    measured = [row for row in rows if row["outcome"] == "accepted"]
    assert all(row["notes"].startswith("max_num_scheduled_tokens is set to 8064") for row in measured)
    assert all(" + " in row["seconds"] for row in measured)  # the start and the benchmark


def test_the_plots_baseline_line_goes_through_the_baselines_own_median_and_names_do_not_overlap() -> None:
    # Each repetition is scored against the median of the baseline's measurements, so the baseline's own
    # median score is near 1.0, not exactly it: a line at 1.0 drew the baseline's point below its line.
    baseline = TuningCandidate(step="baseline", score=0.962, score_min=0.94, score_max=1.01)
    long_name = "gpu_memory_utilization = 0.95, max_num_batched_tokens = 8192"
    run = TuningRun(
        model_id="m",
        node_id="n",
        runtime="vllm",
        goal="balanced",
        started_at=datetime(2026, 1, 1, tzinfo=UTC),
        candidates=[baseline, TuningCandidate(step="batch", description=long_name, score=1.1)],
    )

    options = chart_options(run)

    *_, median = options["series"]
    assert median["markLine"]["data"] == [{"yAxis": 0.962}]
    assert median["data"][0]["value"] == 0.962  # the baseline's point sits on its line
    assert "0.962" in median["markLine"]["label"]["formatter"]
    labels = options["xAxis"]["axisLabel"]
    assert labels["interval"] == 0
    assert labels["rotate"] > 0
    assert labels["overflow"] == "truncate"
    assert options["grid"]["containLabel"] is True


async def test_with_no_run_the_view_says_so_once_and_cancel_is_disabled(master: Master) -> None:
    async with portal_user(master) as user:
        await master.admin.post("/api/models", json=QWEN)
        await user.open("/models/qwen/tuning")
        await user.should_see("No tuning run yet.")
        (cancel,) = user.find(marker="tuning-cancel").elements

    assert isinstance(cancel, ui.button)
    assert not cancel.enabled
