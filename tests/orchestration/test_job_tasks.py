"""JobTasks: the task group of a job service exists only while the service runs."""

from __future__ import annotations

import anyio
import pytest

from mirbad_orchestration.exceptions import MirbadOrchestrationError
from mirbad_orchestration.jobs import JobTasks

pytestmark = pytest.mark.anyio


async def test_a_job_starts_only_while_the_service_runs() -> None:
    tasks = JobTasks("the jobs are not running (Jobs.run)")
    with pytest.raises(MirbadOrchestrationError, match=r"not running \(Jobs\.run\)"):
        tasks.group()

    ran = anyio.Event()

    async def job() -> None:
        ran.set()

    with anyio.fail_after(5):
        async with anyio.create_task_group() as outer:
            await outer.start(tasks.run)
            tasks.group().start_soon(job)
            await ran.wait()
            outer.cancel_scope.cancel()

    with pytest.raises(MirbadOrchestrationError):
        tasks.group()
