"""How every portal action shows a refusal: the admin API's own table, one place, one look.

A page calls :func:`act` around an action of its feature's room. The exception becomes the same
:class:`~mirbad_master._api_errors.Refusal` ``/api`` answers with (so the portal and the API say the same
thing for the same refusal), shown as one negative notification; the page gets :data:`REFUSED` back
and stops there. The unexpected (``internal_error``) is also logged with its traceback, since the
notification is all the person sees. Cancellation is never caught (it is not an ``Exception``).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Mapping
from typing import Any, Final, Literal, TypeVar

from nicegui import ui
from nicegui.elements.mixins.validation_element import ValidationElement

from mirbad_master._admin_auth import ADMIN_USER
from mirbad_master._api_errors import refusal_of
from mirbad_protocol import InvalidFieldError
from mirbad_protocol.admin import AdminErrorCode

__all__ = ["PORTAL_ACTOR", "REFUSED", "Refused", "act", "refusal_text", "show_refusal", "show_under_field"]

PORTAL_ACTOR: Final = f"user:{ADMIN_USER}"
"""Who the audit log says acted for every portal action: the signed-in administrator."""

_logger = logging.getLogger("mirbad_master.ui")
_T = TypeVar("_T")


class Refused(enum.Enum):
    """The one value :func:`act` answers with when the action was refused (shown already)."""

    REFUSED = "refused"


REFUSED: Final = Refused.REFUSED
"""What :func:`act` returns when the action raised; test it with ``is``."""


def refusal_text(exc: Exception) -> str:
    """``exc`` as ``/api`` would word it, for a page that shows it beside the action (a job's message)."""
    refusal = refusal_of(exc)
    if refusal.code is AdminErrorCode.INTERNAL_ERROR:
        _logger.error("a portal action failed unexpectedly", exc_info=exc)
    return refusal.message


def show_refusal(exc: Exception) -> None:
    """Notify the person of ``exc`` as ``/api`` would word it."""
    ui.notify(refusal_text(exc), type="negative", multi_line=True)


async def act(action: Awaitable[_T], *, done: str | None = None) -> _T | Literal[Refused.REFUSED]:
    """Await ``action``; on success notify ``done`` (if given) and return its result.

    Returns:
        The action's result, or :data:`REFUSED` after showing why (see :func:`show_refusal`).
    """
    try:
        result = await action
    except Exception as exc:  # every refusal, mapped by the API's table; unexpected ones logged
        show_refusal(exc)
        return REFUSED
    if done is not None:
        ui.notify(done, type="positive")
    return result


def show_under_field(exc: Exception, fields: Mapping[str, Any], *, fallback: Any = None) -> None:
    """Draw an invalid field's reason under its input in the form; any other refusal as :func:`show_refusal`.

    Args:
        exc: the refusal.
        fields: the form's inputs by the wire name of the field each fills in.
        fallback: the input that takes a field the form has no input for (else it is notified).
    """
    if isinstance(exc, InvalidFieldError):
        target = fields.get(exc.field, fallback)
        if isinstance(target, ValidationElement):
            target.error = exc.reason
            return
    show_refusal(exc)
