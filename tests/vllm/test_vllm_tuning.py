"""Tuning runs on the real vLLM CPU image, end to end: ``mirbad up``'s master and agent, Docker, vLLM.

Two runs, each started through the admin API exactly as the portal starts it, the candidates run as
tuning instances of the agent's container driver on the shared dockerd: the whole Quick plan of the
throughput preset (the last test, about eight vLLM starts), and before it one explicit step whose rows
are pinned exactly. Both are lean, since every candidate is a fresh vLLM start (a minute or more on
two shared cores): tiny preset sizes, one repetition in the search and two in the confirmation stage
(``MIRBAD_TUNING_REPETITIONS``). The step is ``async_scheduling`` on a model saved with it off (so
"off" is the baseline's duplicate and "on" the one candidate). The model is saved with full CUDA
graphs, as a definition written for a GPU would be: vLLM's CPU platform runs without CUDA graphs and
says so in its engine's config line, which the candidates' RuntimeNotes must report.

What is asserted is what is real: each candidate started (its start timed) or failed with its cause,
RuntimeNotes read from vLLM's own log, the confirmation stage decided (keeping the saved settings is
an honest outcome: on CPU vLLM switches async scheduling off, so the candidate differs by noise), the
saved model came back Ready, the registry's file is byte for byte unchanged and no tuning container
is left.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from tests._support.mirbad_up import Admin, Up
from tests._support.polling import until
from tests._support.vllm_image import MODEL_NAME, ensure_model
from tests._support.vllm_up import TINY_PRESET, vllm_up

from mirbad_orchestration.commandline import TUNING_LABEL
from mirbad_orchestration.tuning import tuning_id
from mirbad_runtime import MODEL_LABEL

pytestmark = [
    pytest.mark.long(minutes=12),
    pytest.mark.vllm,
    pytest.mark.docker,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="vLLM's CPU image runs on Linux"),
    pytest.mark.timeout(1500),
]

START_S = 600.0
"""vLLM's start on two shared cores: ~35 s alone, several minutes while other tests load the CPUs."""
RUN_S = 1200.0
"""The whole run: four to six starts (baseline, candidate, the confirmation's two, the restore)."""
REQUESTED_GRAPHS = "FULL_AND_PIECEWISE"
NO_GRAPHS_NOTE = f"cudagraph_mode NONE (requested {REQUESTED_GRAPHS})"
"""vLLM's CPU platform has no static graphs: its engine's config line reads NONE whatever was asked."""


@pytest.fixture
def up(tmp_path: Path, run_id: str) -> Iterator[Up]:
    """``mirbad up`` with the tiny HF model in its model root, its tuning at one and two repetitions."""
    shutil.copytree(ensure_model(), tmp_path / "data" / "models" / MODEL_NAME)
    env = {
        "MIRBAD_PRESET_SIZES": TINY_PRESET.model_dump_json(by_alias=True),
        "MIRBAD_TUNING_REPETITIONS": "1,2",
    }
    with vllm_up(tmp_path, run_id, env=env) as started:
        try:
            yield started
        finally:
            _remove_tuning_containers(f"tiny-{run_id}")


def _tuning_containers(model_id: str) -> list[Any]:
    client = docker.from_env(version="auto", timeout=60)
    try:
        filters: dict[str, Any] = {"label": [f"{TUNING_LABEL}=1", f"{MODEL_LABEL}={tuning_id(model_id)}"]}
        return list(client.containers.list(all=True, filters=filters))
    finally:
        client.close()


def _remove_tuning_containers(model_id: str) -> None:
    """Whatever a failed test left: the tuning id holds this test's run id, so nothing else is touched."""
    for container in _tuning_containers(model_id):
        container.remove(force=True)


def _wait_state(admin: Admin, up: Up, model_id: str, state: str) -> dict[str, Any]:
    seen: list[dict[str, Any]] = []

    def reached() -> bool:
        seen.append(admin.view(model_id)["status"])
        return bool(seen[-1]["state"] == state)

    until(reached, lambda: f"{model_id} never became {state}: {seen[-1:]}\n{up.log()}", timeout_s=START_S)
    return seen[-1]


def _run_to_its_end(admin: Admin, up: Up, job_id: str, timeout_s: float = RUN_S) -> dict[str, Any]:
    seen: list[dict[str, Any]] = []

    def ended() -> bool:
        seen[:] = [job for job in admin.ok("GET", "/api/tuning")["jobs"] if job["id"] == job_id]
        return bool(seen) and seen[0]["state"] != "running"

    until(ended, lambda: f"the tuning run did not end: {seen}\n{up.log()}", timeout_s=timeout_s)
    return seen[0]


def _tiny_model(up: Up, model_id: str) -> dict[str, Any]:
    return {
        "id": model_id,
        "servedName": "tiny-vllm",
        "image": up.env["MIRBAD_TEST_IMAGE"],
        "modelPath": MODEL_NAME,
        "maxModelLen": 256,
        "maxNumSeqs": 2,
        "memoryBudgetGiB": 4,
        "asyncScheduling": False,
        "cudaGraphMode": REQUESTED_GRAPHS,
        "extraArgs": ["--dtype", "bfloat16", "--enforce-eager"],
    }


def _started(admin: Admin, up: Up, model_id: str) -> tuple[dict[str, Any], bytes]:
    """The tiny model defined, started and Ready: its status then, and the registry's bytes."""
    admin.ok("POST", "/api/models", json=_tiny_model(up, model_id))
    admin.ok("POST", f"/api/models/{model_id}/start")
    ready = _wait_state(admin, up, model_id, "Ready")
    return ready, (up.data_dir / "models.json").read_bytes()


def _check_nothing_left(admin: Admin, up: Up, model_id: str, ready: dict[str, Any], before: bytes) -> None:
    """The saved model is back with its saved settings; the registry and Docker show no trace."""
    back = _wait_state(admin, up, model_id, "Ready")
    assert back["configHash"] == ready["configHash"]
    assert (up.data_dir / "models.json").read_bytes() == before
    assert _tuning_containers(model_id) == []


def _check_measured(row: dict[str, Any], repetitions: int) -> None:
    """A measured row: started (timed) and benchmarked, or failed with vLLM's cause."""
    assert row["outcome"] in ("accepted", "rejected", "failed"), row
    if row["outcome"] == "failed":
        assert row["error"], row  # a start vLLM refused says why
        return
    assert row["startSeconds"] > 0, row
    assert row["benchmarkSeconds"] > 0, row
    assert len(row["scores"]) == repetitions, row
    # Read from the candidate's own log: vLLM's engine config line, graphs resolved to NONE.
    assert NO_GRAPHS_NOTE in row["runtimeNotes"], row["runtimeNotes"]


def test_a_tuning_run_on_the_real_vllm_measures_its_candidates_and_decides(up: Up, run_id: str) -> None:
    password = up.first_run_password(up.start())
    admin = Admin(up.base_url, password)
    try:
        model_id = f"tiny-{run_id}"
        ready, before = _started(admin, up, model_id)

        body = {"preset": "throughput", "steps": ["async_scheduling"]}
        job = admin.ok("POST", f"/api/models/{model_id}/tune", json=body)
        assert (job["preset"], job["steps"]) == ("throughput", ["async_scheduling"])
        ended = _run_to_its_end(admin, up, job["id"])
        assert ended["state"] == "succeeded", ended
        [run] = admin.ok("GET", f"/api/models/{model_id}/tuning")["runs"]
        assert (run["preset"], run["repetitions"], run["confirmRepetitions"]) == ("throughput", 1, 2)

        # The saved settings first, then "on"; "off" is the saved configuration again, never restarted.
        [baseline, *candidates] = run["candidates"]
        assert baseline["step"] == "baseline"
        assert [row["changes"] for row in candidates] == [
            {"async_scheduling": "on"},
            {"async_scheduling": "off"},
        ]
        assert candidates[1]["outcome"] == "duplicate"
        measured = [baseline, candidates[0], *run["confirmation"]]
        for row in measured:
            _check_measured(row, 2 if row in run["confirmation"] else 1)
        assert candidates[0]["fingerprint"] != baseline["fingerprint"]
        assert "async-scheduling=off cudagraph=FULL_AND_PIECEWISE" in baseline["effectiveConfig"]
        assert "async-scheduling=on" in candidates[0]["effectiveConfig"]
        assert baseline["outcome"] == "accepted", baseline

        # The confirmation stage decided: a winner beat the re-measured baseline by 5 % with ranges
        # apart, or the saved settings are kept (the search's best was no better, or not by enough).
        assert run["winner"] is not None
        if run["winnerIsBaseline"]:
            assert any("saved settings are kept" in note for note in run["notes"]), run["notes"]
            assert run["bestDefinition"] is None
        else:
            [base_again] = [row for row in run["confirmation"] if row["changes"] == {}]
            assert run["winner"]["scoreMin"] > base_again["scoreMax"]
            assert run["bestDefinition"]["asyncScheduling"] is True
        assert not any("did not come back" in note for note in run["notes"]), run["notes"]

        _check_nothing_left(admin, up, model_id, ready, before)
    finally:
        admin.close()


@pytest.mark.timeout(2700)
def test_the_quick_plan_on_the_real_vllm_runs_to_a_decision(up: Up, run_id: str) -> None:
    password = up.first_run_password(up.start())
    admin = Admin(up.base_url, password)
    try:
        model_id = f"tiny-{run_id}"
        ready, before = _started(admin, up, model_id)

        job = admin.ok("POST", f"/api/models/{model_id}/tune", json={"preset": "throughput"})
        ended = _run_to_its_end(admin, up, job["id"], timeout_s=2400.0)
        assert ended["state"] == "succeeded", ended
        [run] = admin.ok("GET", f"/api/models/{model_id}/tuning")["runs"]
        assert (run["preset"], run["search"]) == ("throughput", "quick")

        [baseline, *candidates] = run["candidates"]
        assert baseline["outcome"] == "accepted", baseline
        assert {row["step"] for row in candidates} >= {"max_num_seqs"}
        for row in [baseline, *candidates]:
            if row["outcome"] != "duplicate":
                _check_measured(row, 1)
        for row in run["confirmation"]:
            _check_measured(row, 2)
        assert run["winner"] is not None
        if run["winnerIsBaseline"]:
            assert any("saved settings are kept" in note for note in run["notes"]), run["notes"]
        else:
            [base_again] = [row for row in run["confirmation"] if row["changes"] == {}]
            assert run["winner"]["scoreMin"] > base_again["scoreMax"]
        assert not any("did not come back" in note for note in run["notes"]), run["notes"]
        for row in [baseline, *candidates, *run["confirmation"]]:
            # What the run found, for the record (pytest -s shows it).
            print(row["step"], row["changes"], row["outcome"], row.get("scores"), row.get("startSeconds"))
        print("winner", run["winner"]["changes"], "baseline kept" if run["winnerIsBaseline"] else "")

        _check_nothing_left(admin, up, model_id, ready, before)
    finally:
        admin.close()
