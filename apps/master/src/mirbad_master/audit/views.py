"""What other rooms take from the audit room: the Audit view's address for one subject."""

from __future__ import annotations

from urllib.parse import urlencode

__all__ = ["audit_link"]


def audit_link(subject: str) -> str:
    """The Audit view's address for everything about ``subject`` (a model's or a node's id)."""
    return f"/audit?{urlencode({'subject': subject})}"
