"""Crashes in a row per model, and the decision each one leads to: restart after a backoff, or pause.

The count lives in memory; only its outcome, a pause, is persisted (``restart-pauses.json``), so that a
model that keeps crashing stays down across a master restart. A start by hand or a long enough Ready
spell forgets the count and lifts the pause.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from mirbad_orchestration.stores import AuditLog

from ._health_settings import AUTOSTART_ACTOR, HealthSettings
from ._lane_launch import audit_model
from ._restart_pauses import RestartPause, RestartPauses

__all__: list[str] = []

_logger = logging.getLogger("mirbad_orchestration.health")

Key = tuple[str, str]  # (node id, model id)


class CrashLedger:
    """The health monitor's crash bookkeeping (see the module)."""

    def __init__(
        self,
        pauses: RestartPauses,
        audit: AuditLog | None,
        settings: HealthSettings,
        clock: Callable[[], datetime],
    ) -> None:
        self._pauses = pauses
        self._audit = audit
        self._settings = settings
        self._clock = clock
        self._crashes: dict[Key, int] = {}

    async def record(self, key: Key, error: str, *, node_down: bool = False) -> float | None:
        """Count one more crash of ``key``; return the wait before its restart, or ``None`` for none.

        Args:
            key: the node and the model.
            error: what the crash reported.
            node_down: the restart failed because the node did not answer; that is not the model's
                fault, so it is retried after the current backoff without counting.

        Raises:
            StateFileError: the pause could not be persisted (the count is kept, so the next crash
                tries again).
        """
        node_id, model_id = key
        if not self._settings.crash_restart:
            _logger.warning("model %s on %s crashed; automatic restarts are off", model_id, node_id)
            return None
        if node_down:
            delay = self._settings.backoff(max(self._crashes.get(key, 0), 1))
            _logger.warning(
                "model %s on %s: node not answering (%s); retrying in %gs", model_id, node_id, error, delay
            )
            return delay
        crashes = self._crashes[key] = self._crashes.get(key, 0) + 1
        if crashes >= self._settings.crash_restart_limit:
            await self._pause(key, crashes, error)
            return None
        delay = self._settings.backoff(crashes)
        _logger.warning(
            "model %s on %s crashed (%d in a row): restarting in %gs", model_id, node_id, crashes, delay
        )
        return delay

    async def forgive(self, model_id: str, *, by: str) -> None:
        """Forget ``model_id``'s crashes and lift its pause: ``by`` started it by hand."""
        self._forget(model_id)
        if await self._pauses.clear(model_id) is not None:
            _logger.info("model %s: automatic restarts resumed by %s", model_id, by)

    def forget(self, model_id: str) -> None:
        """Forget ``model_id``'s crashes (it was stopped on purpose); a pause stays."""
        self._forget(model_id)

    async def ready_long_enough(self, key: Key) -> None:
        """``key`` stayed Ready for the reset time: its count starts over and its pause is lifted."""
        cleared = self._crashes.pop(key, None) is not None
        cleared = await self._pauses.clear(key[1]) is not None or cleared
        if cleared:
            _logger.info("model %s on %s: Ready long enough, crash count cleared", key[1], key[0])

    def _forget(self, model_id: str) -> None:
        for key in [key for key in self._crashes if key[1] == model_id]:
            del self._crashes[key]

    async def _pause(self, key: Key, crashes: int, error: str) -> None:
        node_id, model_id = key
        pause = RestartPause(
            model_id=model_id, node_id=node_id, crashes=crashes, last_error=error, paused_at=self._clock()
        )
        await self._pauses.pause(pause)
        _logger.warning(
            "model %s on %s crashed %d times in a row: automatic restarts paused (%s)",
            model_id,
            node_id,
            crashes,
            last_line(error),
        )
        await audit_model(self._audit, AUTOSTART_ACTOR, "model.restart-pause", model_id, node_id, "ok", error)


def last_line(text: str) -> str:
    """The last non-blank line of ``text``, at most 200 characters.

    Errors carry the tail of a model's log; a line of the monitor's own log shows only its last line.
    """
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""
