"""The typed client's tuning calls, both twins, against a real master served on loopback (simulated runs)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests._support.asgi_server import serve_asgi
from tests.client.test_client import QWEN, client_of
from tests.master._stack import running_master
from tests.master.test_api_benchmarks import chatty, ready
from tests.master.test_api_tuning import Runners, preset_truth

from mirbad_client import AdminApiError
from mirbad_master._app import create_master_app
from mirbad_orchestration.jobs import JobTarget
from mirbad_orchestration.tuning import CandidateRunner, PresetSimulatedRunner
from mirbad_protocol import ModelDefinition

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sync", "async"])
def kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


async def test_tuning_calls(tmp_path: Path, kind: str) -> None:
    options = {"tuning_runners": Runners(), "tuning_repetitions": (2, 3)}
    async with (
        running_master(tmp_path, agent=chatty, services_options=options) as master,
        serve_asgi(create_master_app(master.services, master.auth)) as url,
        client_of(kind, url, master.password) as admin,
    ):
        await ready(master, QWEN.to_wire())
        with pytest.raises(AdminApiError) as unknown:
            await admin("tune", "qwen", steps=["warp"])
        job = await admin("tune", "qwen", goal="many-agents", steps=["max_num_seqs"])
        ended = await master.services.tuning.wait(job.id, timeout_s=10)
        jobs = await admin("tuning_jobs")
        runs = await admin("tuning_runs", "qwen")
        applied = await admin("apply_tuning", "qwen", runs.files[0])
        with pytest.raises(AdminApiError) as nothing:
            await admin("cancel_tuning")

    assert (unknown.value.status_code, unknown.value.code) == (422, "unknown_tuning_step")
    assert (job.model_id, job.goal, job.steps) == ("qwen", "many-agents", ["max_num_seqs"])
    assert ended.state == "succeeded"
    assert [j.id for j in jobs] == [job.id]
    assert runs.runs[0].best_definition is not None
    assert applied.definition.max_num_seqs == 32
    assert applied.restart_pending
    assert nothing.value.status_code == 404


async def test_a_preset_tuning_through_the_client(tmp_path: Path, kind: str) -> None:
    async def runners(target: JobTarget, saved: ModelDefinition) -> CandidateRunner:
        return PresetSimulatedRunner(preset_truth, noise=0.005, seed=2)

    options = {"tuning_runners": runners, "tuning_repetitions": (2, 3)}
    async with (
        running_master(tmp_path, agent=chatty, services_options=options) as master,
        serve_asgi(create_master_app(master.services, master.auth)) as url,
        client_of(kind, url, master.password) as admin,
    ):
        await ready(master, QWEN.to_wire())
        with pytest.raises(AdminApiError) as unknown:
            await admin("tune", "qwen", preset="warp")
        job = await admin("tune", "qwen", preset="throughput", steps=["max_num_seqs"])
        ended = await master.services.tuning.wait(job.id, timeout_s=10)
        runs = await admin("tuning_runs", "qwen")

    assert (unknown.value.status_code, unknown.value.code) == (422, "unknown_preset")
    assert (job.preset, job.steps) == ("throughput", ["max_num_seqs", "refine_max_num_seqs"])
    assert ended.state == "succeeded"
    assert runs.runs[0].preset == "throughput"
    assert runs.runs[0].best_definition is not None
    assert runs.runs[0].best_definition.max_num_seqs == 32
