"""What separates user input from wire messages: the checks only what a person typed has to pass.

Between our own processes and in stored files a model stays tolerant: an additive field of a newer
peer is ignored and a value stored by an older release still loads. What a person sends (an admin API
body, a portal form, a ``mirbad args`` file) is validated with the :data:`USER_INPUT` context by
:meth:`~mirbad_protocol.WireModel.from_user_input`: an unknown field is refused with its name (and the
nearest real one), and the limits below apply. The limits sit far above any real deployment; they only
stop values that are certainly typos (``1e308`` GiB, ``2**48`` sequences).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler, ValidationInfo
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from .exceptions import InvalidFieldError

__all__ = [
    "USER_INPUT",
    "UserCheck",
    "UserMaximum",
    "check_storable_text",
    "is_image_reference",
    "is_user_input",
    "printable_name",
    "unknown_field_reason",
]

USER_INPUT: Final = "mirbad.user_input"
"""The validation-context key that marks a value as typed by a person (see :func:`is_user_input`)."""

# docker's reference grammar ([registry[:port]/]path[:tag][@digest]), written out from its description.
_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|-+)"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9A-Fa-f:.]+\])"
_DOMAIN = rf"{_HOST}(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_IMAGE: Final = re.compile(
    rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*(?::{_TAG})?(?:@{_DIGEST})?", re.ASCII
)
_MAX_IMAGE_NAME: Final = 255  # docker refuses longer repository names


def is_user_input(info: ValidationInfo) -> bool:
    """Whether the value being validated was typed by a person (validated with :data:`USER_INPUT`)."""
    return isinstance(info.context, dict) and bool(info.context.get(USER_INPUT))


def is_image_reference(value: str) -> bool:
    """Whether ``value`` is an image reference docker accepts: ``[registry[:port]/]name[:tag][@digest]``."""
    if not _IMAGE.fullmatch(value):
        return False
    name = value.partition("@")[0]
    last = name.rsplit("/", 1)[-1]
    if ":" in last:  # a tag (a colon before the last slash is the registry's port)
        name = name[: len(name) - len(last) + last.index(":")]
    return len(name) <= _MAX_IMAGE_NAME


def printable_name(value: str) -> str:
    """Refuse a name with control, format or invisible characters (they forge log lines and tables)."""
    if not value.isprintable():
        raise ValueError("must contain printable characters only (no control or invisible characters)")
    return value


def check_storable_text(value: object, path: tuple[str, ...] = ()) -> None:
    r"""Refuse a lone surrogate in any string or key of ``value`` (a dumped model, wire names).

    JSON may escape one (``"\udc80"``) and Python keeps it, but no UTF-8 file can hold it: stored as
    it is, the write would fail after validation passed.

    Raises:
        InvalidFieldError: naming the field (``extraArgs.1``) that holds it.
    """
    if isinstance(value, str):
        if any("\ud800" <= ch <= "\udfff" for ch in value):
            raise InvalidFieldError(".".join(path) or "(document)", "must be Unicode text (a lone surrogate)")
    elif isinstance(value, dict):
        for key, item in value.items():
            check_storable_text(key, path)
            check_storable_text(item, (*path, str(key)))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            check_storable_text(item, (*path, str(index)))


def unknown_field_reason(unknown: str, known: Iterable[str]) -> str:
    """The reason an unknown field is refused, with the nearest known spelling when one is close."""
    close = difflib.get_close_matches(unknown, list(known), n=1, cutoff=0.75)
    if not close:
        # Case slips ("memoryBudgetGIB") are the commonest typo; compare case-insensitively too.
        folded = {name.casefold(): name for name in known}
        close = [
            folded[m] for m in difflib.get_close_matches(unknown.casefold(), list(folded), n=1, cutoff=0.75)
        ]
    return f"unknown field; did you mean `{close[0]}`?" if close else "unknown field"


@dataclass(frozen=True)
class UserMaximum:
    """``Annotated`` metadata: in user input the value must be at most ``maximum``; the JSON schema says so.

    Stored files and wire messages are not held to it, so a value stored before the limit existed loads.
    """

    maximum: int | float

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.with_info_after_validator_function(self._check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        json_schema["maximum"] = self.maximum
        return json_schema

    def _check(self, value: Any, info: ValidationInfo) -> Any:
        if is_user_input(info) and value > self.maximum:
            raise ValueError(f"must be at most {self.maximum:g}")
        return value


@dataclass(frozen=True)
class UserCheck:
    """``Annotated`` metadata: a check that only user input has to pass (stored values stay loadable).

    Attributes:
        check: returns the value or raises ``ValueError`` with the reason.
    """

    check: Callable[[Any], Any]

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.with_info_after_validator_function(self._check, handler(source))

    def _check(self, value: Any, info: ValidationInfo) -> Any:
        return self.check(value) if is_user_input(info) else value
