"""Every read of the audit room, whoever asks (the admin API, the portal): one page of the log.

The filters arrive as typed. A blank filter is no filter; a time is ISO 8601 (one without a zone is
UTC); the limit is 1 to 500. Whatever cannot be read is refused with ``AuditQueryError`` naming the
field (``since``, ``until``, ``limit``, ``cursor``), which the API answers 422 ``invalid_audit_query``.
"""

from __future__ import annotations

from dataclasses import dataclass

from mirbad_master._composition import MasterServices
from mirbad_orchestration.exceptions import AuditQueryError
from mirbad_orchestration.stores import DEFAULT_AUDIT_PAGE, AuditQuery, parse_audit_time
from mirbad_protocol.admin import AuditList

__all__ = ["AuditFilters", "audit_page"]


@dataclass(frozen=True)
class AuditFilters:
    """The audit view's filters as typed (query parameters, the portal's inputs); blanks filter nothing.

    Attributes:
        actor: who (``user:admin``, ``key:ci``, ``system:autostart``), exactly.
        action: what, exactly or as a dotted prefix (``model`` for every ``model.*``).
        subject: the model, node or key an entry is about (its target, or the node it involved).
        since: the earliest time (ISO 8601), included.
        until: the latest time (ISO 8601), excluded.
    """

    actor: str | None = None
    action: str | None = None
    subject: str | None = None
    since: str | None = None
    until: str | None = None

    def query(self) -> AuditQuery:
        """The library's query.

        Raises:
            AuditQueryError: a time that does not parse, or ``until`` not after ``since``.
        """
        since, until = _text(self.since), _text(self.until)
        return AuditQuery(
            actor=_text(self.actor),
            action=_text(self.action),
            subject=_text(self.subject),
            since=None if since is None else parse_audit_time("since", since),
            until=None if until is None else parse_audit_time("until", until),
        )


async def audit_page(
    services: MasterServices,
    filters: AuditFilters,
    *,
    limit: str | int | None = None,
    cursor: str | None = None,
) -> AuditList:
    """One page of the entries ``filters`` match, newest first, from ``cursor`` (the last page's ``next``).

    Raises:
        AuditQueryError: a filter, limit or cursor that cannot be read (``field`` names it).
    """
    page = await services.audit.page(filters.query(), limit=_limit(limit), cursor=_text(cursor))
    return AuditList(entries=page.entries, next=page.next)


def _text(value: str | None) -> str | None:
    if value is None or not value.strip():
        return None
    return value.strip()


def _limit(value: str | int | None) -> int:
    if isinstance(value, int):
        return value
    text = _text(value)
    if text is None:
        return DEFAULT_AUDIT_PAGE
    try:
        return int(text)
    except ValueError:
        raise AuditQueryError("limit", f"{text!r} is not a whole number") from None
