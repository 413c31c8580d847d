"""The admin API's audit views: one line of the audit log, and a page of them.

The master answers ``GET /api/audit`` with an :class:`AuditList`, newest first; its ``next`` is the
opaque cursor of the following (older) page, sent back as ``cursor``. The master's audit log stores
each line as the :class:`AuditEntry` it answers with.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from ._wire import WireModel

__all__ = ["AuditEntry", "AuditList", "AuditOutcome"]

AuditOutcome = Literal["ok", "failed", "refused"]
"""How an audited action ended: done, tried and failed, or not allowed / not attempted."""


class AuditEntry(WireModel):
    """One audited action.

    Attributes:
        at: when it was recorded (UTC).
        actor: who did it: ``user:<name>``, ``key:<id>``, or ``system:<part>`` for the master itself
            (``system:autostart`` for its automatic starts and restarts).
        action: what was done, dotted (``model.start``, ``model.stop``).
        target: what it was done to (a model id, a node id, a key id).
        outcome: how it ended.
        node_id: the node involved, when there is one.
        detail: an error message or other short explanation.
    """

    at: datetime
    actor: str
    action: str
    target: str
    outcome: AuditOutcome
    node_id: str | None = None
    detail: str | None = None


class AuditList(WireModel):
    """One page of the audit log, newest first.

    Attributes:
        entries: the page's entries.
        next: the cursor of the next (older) page; null on the last page (always sent).
    """

    entries: list[AuditEntry]
    next: str | None
