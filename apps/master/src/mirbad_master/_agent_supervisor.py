"""Keeping the local agent of a fleet of one alive: restart with back-off, and back for the shutdown.

The agent is the only part of ``mirbad up`` that may touch the models' processes and containers (the
master never does), so a dead agent is restarted: it adopts the models that still run (by its
``processes.json`` and by the containers' labels), and the master sees node ``local`` come back. The
restarts are bounded: after :attr:`AgentSupervisor.max_restarts` short-lived runs in a row the
supervisor gives up and says so. At shutdown a dead agent is started once more, whatever the count,
because only the agent can stop the models it left running.
"""

from __future__ import annotations

import logging
from typing import Final

import anyio

from ._local_agent import AgentProbe, LocalAgent
from .exceptions import LocalAgentError

__all__ = ["AgentSupervisor"]

_logger = logging.getLogger("mirbad_master.agent")
_ANSWER_TIMEOUT_S: Final = 60.0


class AgentSupervisor:
    """Restarts the local agent when it exits on its own.

    Args:
        agent: the local agent, already started.
        probe: how to tell it answers.
        backoff_s: the wait before the first restart; it doubles with every restart in a row.
        backoff_max_s: the longest wait between restarts.
        max_restarts: restarts in a row (each run shorter than ``stable_s``) before giving up.
        stable_s: a run at least this long resets the count.
        answer_timeout_s: how long a restarted agent has to answer.
    """

    def __init__(
        self,
        agent: LocalAgent,
        probe: AgentProbe,
        *,
        backoff_s: float = 1.0,
        backoff_max_s: float = 30.0,
        max_restarts: int = 5,
        stable_s: float = 60.0,
        answer_timeout_s: float = _ANSWER_TIMEOUT_S,
    ) -> None:
        self.agent = agent
        self.max_restarts = max_restarts
        self.restarts = 0
        self._probe = probe
        self._backoff_s = backoff_s
        self._backoff_max_s = backoff_max_s
        self._stable_s = stable_s
        self._answer_timeout_s = answer_timeout_s
        self._lock = anyio.Lock()
        self._hurry = anyio.Event()
        self._stopped = anyio.Event()
        self._planned_exits = 0

    async def run(self) -> None:
        """Watch the agent until :meth:`stop`; restart it (bounded, logged) whenever it exits."""
        in_a_row = 0
        while not self._stopped.is_set():
            began = anyio.current_time()
            code = await self.agent.wait_exit()
            if self._stopped.is_set():
                return
            if self._planned_exits:
                # :meth:`restart` stopped it and is starting the next one: no crash, no back-off.
                self._planned_exits -= 1
                async with self._lock:
                    continue
            lasted = anyio.current_time() - began
            in_a_row = 1 if lasted >= self._stable_s else in_a_row + 1
            if in_a_row > self.max_restarts and not self._hurry.is_set():
                _logger.error(
                    "the local agent exited (code %s) %d times in a row; not restarting it again. "
                    "Node local is unreachable until `mirbad up` is restarted; its log says why:\n%s",
                    code,
                    in_a_row,
                    self.agent.log_tail(),
                )
                await self._hurry.wait()  # the shutdown still brings it back to stop the models
            delay = min(self._backoff_s * 2 ** (in_a_row - 1), self._backoff_max_s)
            _logger.warning(
                "the local agent exited (code %s) after %.0f s; restarting it in %g s (restart %d of %d "
                "in a row); its log:\n%s",
                code,
                lasted,
                delay,
                in_a_row,
                self.max_restarts,
                self.agent.log_tail(5),
            )
            with anyio.move_on_after(delay):
                await self._hurry.wait()
            if await self.ensure_answering():
                self.restarts += 1
                _logger.info("the local agent is back; it adopted the models that still run")

    def hurry(self) -> None:
        """The fleet is shutting down: restart a dead agent at once, however often it died."""
        self._hurry.set()

    async def ensure_answering(self) -> bool:
        """Start the agent if it is not running and wait (bounded) until it answers; False if it did not."""
        async with self._lock:
            if self._stopped.is_set():
                return False
            try:
                if not self.agent.running:
                    await self.agent.start()
                await self.agent.wait_until_answering(self._probe, self._answer_timeout_s)
            except LocalAgentError as exc:
                _logger.error("%s", exc)
                return False
            return True

    async def restart(self) -> bool:
        """Stop the agent and start it again (to read a rewritten settings file); not counted as a crash.

        Returns:
            Whether the new agent answers (a failure is logged; :meth:`run` then treats it as a crash).
        """
        async with self._lock:
            if self._stopped.is_set():
                return False
            if self.agent.running:
                self._planned_exits += 1
                await self.agent.stop()
            try:
                await self.agent.start()
                await self.agent.wait_until_answering(self._probe, self._answer_timeout_s)
            except LocalAgentError as exc:
                _logger.error("%s", exc)
                return False
            return True

    async def stop(self, grace_s: float | None = None) -> int | None:
        """Stop watching and stop the agent (see :meth:`LocalAgent.stop`; ``grace_s`` None: its default)."""
        self._stopped.set()
        async with self._lock:
            return await (self.agent.stop() if grace_s is None else self.agent.stop(grace_s))
