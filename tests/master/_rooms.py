"""What the room tests share: a change through ``/api`` and through the portal's path, read alike.

Each room's test runs a scenario twice, once over HTTP against the master's app and once through the
room's actions with the portal's actor (as its page calls them), each on a master of its own; the audit
lines and the refusals of the same bad input must match (a refusal in the portal is read through the
API's own error mapping, as the portal shows it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import httpx
from tests.master._stack import Master

from mirbad_master._api_errors import Refusal, refusal_of
from mirbad_protocol import MirbadError

AuditLine = tuple[str, str, str, str | None, str]
"""An audit entry as the room tests compare it: actor, action, target, node, outcome."""


async def audit_lines(master: Master) -> list[AuditLine]:
    """The day's audit lines, with the ids that differ from one master to the other masked."""
    entries = await master.services.audit.read(datetime.now(UTC).date())
    lines = [(e.actor, e.action, e.target, e.node_id, str(e.outcome)) for e in entries]
    # A key's id is random: only key.require names something both masters share.
    keyed = {"key.create", "key.revoke", "key.delete"}
    return [(a, action, "<key>" if action in keyed else t, n, o) for a, action, t, n, o in lines]


def api_refusal(response: httpx.Response) -> Refusal:
    """The refusal an ``/api`` answer carries."""
    assert response.status_code >= 400, response.text
    error = response.json()["error"]
    return Refusal(response.status_code, error["code"], error["message"], error.get("field"))


async def portal_refusal(change: Callable[[], Awaitable[object]]) -> Refusal:
    """The refusal the portal shows for ``change`` (the API's table, as ``show_refusal`` reads it)."""
    try:
        await change()
    except MirbadError as exc:
        return refusal_of(exc)
    raise AssertionError("the portal accepted what the API refuses")


async def ok(response: Awaitable[httpx.Response]) -> dict[str, Any]:
    """The JSON of an accepted ``/api`` answer (``{}`` for an empty one)."""
    answer = await response
    assert answer.status_code < 300, answer.text
    return answer.json() if answer.content else {}
