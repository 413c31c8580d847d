"""The typed client's benchmark calls, both twins, against a real master served on loopback."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from tests._support.asgi_server import serve_asgi
from tests._support.polling import eventually
from tests.client.test_client import QWEN, client_of
from tests.master._stack import running_master
from tests.master.test_api_benchmarks import TINY, chat_of, chatty, ready

from mirbad_client import AdminApiError
from mirbad_master._app import create_master_app

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sync", "async"])
def kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


async def test_benchmark_calls(tmp_path: Path, kind: str) -> None:
    options = {"benchmark_sizes": TINY, "drain_timeout_s": 2.0}
    async with (
        running_master(tmp_path, agent=chatty, services_options=options) as master,
        serve_asgi(create_master_app(master.services, master.auth)) as url,
        client_of(kind, url, master.password) as admin,
    ):
        await ready(master, QWEN.to_wire())
        chat_of(master).hold = anyio.Event()
        job = await admin("benchmark", "qwen")
        await eventually(lambda: chat_of(master).holding > 0, timeout_s=10)
        with pytest.raises(AdminApiError) as conflict:
            await admin("benchmark", "qwen")
        with pytest.raises(AdminApiError) as preset:
            await admin("benchmark", "qwen", preset="fastest")
        running = await admin("benchmark_jobs")
        [cancelled] = await admin("cancel_benchmark", "local")
        chat_of(master).hold = None
        second = await admin("benchmark", "qwen")
        ended = await master.services.jobs.wait(second.id, timeout_s=10)
        results = await admin("benchmarks", "qwen")

    assert (job.model_id, job.state) == ("qwen", "running")
    assert (conflict.value.status_code, conflict.value.code) == (409, "job_conflict")
    assert job.id in str(conflict.value)
    assert (preset.value.status_code, preset.value.code) == (422, "unknown_preset")
    assert [j.id for j in running] == [job.id]
    assert cancelled.state == "cancelled"
    assert ended.state == "succeeded"
    assert [r.model_id for r in results.results] == ["qwen"]
