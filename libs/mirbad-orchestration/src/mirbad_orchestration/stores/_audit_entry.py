"""One line of the audit log: who did what to which thing, and how it went."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from mirbad_protocol import WireModel

__all__ = ["AuditEntry", "AuditOutcome"]

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
