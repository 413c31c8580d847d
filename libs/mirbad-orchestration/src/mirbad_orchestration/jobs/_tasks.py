"""The task group a job service runs its jobs in, held for as long as the service runs."""

from __future__ import annotations

import anyio
from anyio.abc import TaskGroup, TaskStatus

from mirbad_orchestration.exceptions import MirbadOrchestrationError

__all__ = ["JobTasks"]


class JobTasks:
    """Holds the jobs' task group while :meth:`run` runs; leaving it cancels every running job.

    Args:
        not_running: the error's message when a job is started while the service does not run.
    """

    def __init__(self, not_running: str) -> None:
        self._not_running = not_running
        self._group: TaskGroup | None = None

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Hold the task group until cancelled."""
        async with anyio.create_task_group() as group:
            self._group = group
            task_status.started()
            try:
                await anyio.sleep_forever()
            finally:
                self._group = None

    def group(self) -> TaskGroup:
        """The task group to start a job in.

        Raises:
            MirbadOrchestrationError: :meth:`run` is not running.
        """
        if self._group is None:
            raise MirbadOrchestrationError(self._not_running)
        return self._group
