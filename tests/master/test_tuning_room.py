"""The tuning room: a start, a cancel and Apply best through ``/api`` and through the portal read the same.

Each scenario runs on two masters with simulated candidate runners, one driven over HTTP and one
through the room's actions with the portal's actor (what the Tuning view calls); the audit lines and
the refusals must match (a portal refusal is read through the API's own table, as the page shows it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from tests.master._rooms import api_refusal, audit_lines, ok, portal_refusal
from tests.master._stack import Master, running_master
from tests.master.test_api_benchmarks import QWEN, WAIT_S, chatty, ready
from tests.master.test_api_tuning import Runners

from mirbad_master._api_errors import Refusal
from mirbad_master.tuning.actions import apply_tuning_run, cancel_tuning, start_tuning
from mirbad_master.ui._refusals import PORTAL_ACTOR
from mirbad_protocol.tuning import TuningRequest

pytestmark = pytest.mark.anyio

SEATS = {"goal": "many-agents", "steps": ["max_num_seqs"]}


@asynccontextmanager
async def tuning_master(path: Path, runners: Runners) -> AsyncIterator[Master]:
    options = {"tuning_runners": runners, "tuning_repetitions": (2, 3)}
    async with running_master(path, agent=chatty, services_options=options) as master:
        yield master


async def test_a_run_apply_best_and_a_cancel_leave_the_same_audit_lines(tmp_path: Path) -> None:
    runners = Runners()
    async with tuning_master(tmp_path / "api", runners) as master:
        api = master.admin
        await ready(master, QWEN)
        job = await ok(api.post("/api/models/qwen/tune", json=SEATS))
        await master.services.tuning.wait(job["id"], timeout_s=WAIT_S)
        await ok(api.post("/api/models/qwen/tuning/apply"))
        runners.hold = anyio.Event()
        runners.measuring = anyio.Event()
        await ok(api.post("/api/models/qwen/tune", json=SEATS))
        with anyio.fail_after(WAIT_S):
            await runners.measuring.wait()
        await ok(api.delete("/api/tuning", params={"node": "local"}))
        through_the_api = await audit_lines(master)

    runners = Runners()
    async with tuning_master(tmp_path / "portal", runners) as master:
        services = master.services
        await ready(master, QWEN)
        request = TuningRequest.model_validate(SEATS)
        started = await start_tuning(services, "qwen", request, actor=PORTAL_ACTOR)
        await services.tuning.wait(started.id, timeout_s=WAIT_S)
        await apply_tuning_run(services, "qwen", None, actor=PORTAL_ACTOR)
        runners.hold = anyio.Event()
        runners.measuring = anyio.Event()
        await start_tuning(services, "qwen", request, actor=PORTAL_ACTOR)
        with anyio.fail_after(WAIT_S):
            await runners.measuring.wait()
        await cancel_tuning(services, "local", actor=PORTAL_ACTOR)
        through_the_portal = await audit_lines(master)

    tuning_lines = [line[1] for line in through_the_api if line[1].startswith("model.tune")]
    assert tuning_lines == ["model.tune", "model.tune.apply", "model.tune", "model.tune.cancel"]
    assert through_the_portal == through_the_api


async def test_refusals_read_the_same_through_the_api_and_the_portal(tmp_path: Path) -> None:
    reranker = QWEN | {"id": "rank", "servedName": "rank", "tags": ["reranker"]}
    bad_steps = {"steps": ["max_num_seqs", "warp"]}
    async with tuning_master(tmp_path / "api", Runners()) as master:
        api = master.admin
        await ok(api.post("/api/models", json=QWEN))
        await ok(api.post("/api/models", json=reranker))
        by_api: list[Refusal] = [
            api_refusal(await api.post("/api/models/qwen/tune")),
            api_refusal(await api.post("/api/models/rank/tune")),
            api_refusal(await api.post("/api/models/qwen/tune", json=bad_steps)),
            api_refusal(await api.post("/api/models/nope/tune")),
            api_refusal(await api.post("/api/models/qwen/tuning/apply")),
            api_refusal(await api.delete("/api/tuning")),
        ]
        api_lines = await audit_lines(master)

    async with tuning_master(tmp_path / "portal", Runners()) as master:
        services = master.services
        await ok(master.admin.post("/api/models", json=QWEN))
        await ok(master.admin.post("/api/models", json=reranker))
        plain, steps = TuningRequest(), TuningRequest.model_validate(bad_steps)
        by_portal = [
            await portal_refusal(lambda: start_tuning(services, "qwen", plain, actor=PORTAL_ACTOR)),
            await portal_refusal(lambda: start_tuning(services, "rank", plain, actor=PORTAL_ACTOR)),
            await portal_refusal(lambda: start_tuning(services, "qwen", steps, actor=PORTAL_ACTOR)),
            await portal_refusal(lambda: start_tuning(services, "nope", plain, actor=PORTAL_ACTOR)),
            await portal_refusal(lambda: apply_tuning_run(services, "qwen", None, actor=PORTAL_ACTOR)),
            await portal_refusal(lambda: cancel_tuning(services, None, actor=PORTAL_ACTOR)),
        ]
        portal_lines = await audit_lines(master)

    assert [(r.status, r.code) for r in by_api] == [
        (409, "model_not_ready"),
        (422, "preset_not_for_model"),
        (422, "unknown_tuning_step"),
        (404, "model_not_found"),
        (404, "job_not_found"),  # no tuning run to apply
        (404, "job_not_found"),
    ]
    assert by_portal == by_api
    assert portal_lines == api_lines  # a refused change is not audited, whoever asks
