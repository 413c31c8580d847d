"""The base class of every wire model: camelCase on the wire, snake_case in Python."""

from __future__ import annotations

import re
import typing
from collections.abc import Sequence
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, ValidationError, model_serializer
from pydantic.alias_generators import to_camel

from ._user_input import USER_INPUT, check_storable_text, unknown_field_reason
from .exceptions import InvalidFieldError

__all__ = ["WireModel", "field_error_from_validation"]


class WireModel(BaseModel):
    """A frozen pydantic model with the wire conventions of the agent contract.

    Unknown fields are ignored so an older peer reads a newer peer's payload; :meth:`to_wire` omits
    fields at their default so a newer peer's additive fields never reach an older one. What a person
    typed goes through :meth:`from_user_input` instead, which refuses unknown fields.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        frozen=True,
        validate_default=True,
        ser_json_inf_nan="strings",
    )

    def to_wire(self) -> dict[str, Any]:
        """Return the JSON-ready dict sent on the wire (camelCase keys, defaults omitted)."""
        return self.model_dump(mode="json", by_alias=True, exclude_defaults=True)

    # No return annotation on purpose: pydantic would take ``Any`` as the serialized schema and every
    # response schema in /openapi.json would be empty; unannotated, it documents the model's fields.
    @model_serializer(mode="wrap")
    def _keep_kind(self, handler: SerializerFunctionWrapHandler):  # type: ignore[no-untyped-def]
        # A discriminator is never "at its default": a reader needs it to pick the variant, at any depth
        # (a launch spec nested in a start request too), so it survives exclude_defaults.
        data = handler(self)
        if isinstance(data, dict) and "kind" in type(self).model_fields and "kind" not in data:
            data = {"kind": getattr(self, "kind"), **data}  # noqa: B009 - defined by the variants
        return data

    @classmethod
    def from_wire(cls, data: object) -> Self:
        """Validate a decoded JSON value, raising :class:`InvalidFieldError` naming the first bad field."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise field_error_from_validation(exc) from None

    @classmethod
    def from_wire_json(cls, text: str | bytes) -> Self:
        """Validate a JSON document, raising :class:`InvalidFieldError` naming the first bad field."""
        try:
            return cls.model_validate_json(text)
        except ValidationError as exc:
            raise field_error_from_validation(exc) from None

    @classmethod
    def from_user_input(cls, data: object) -> Self:
        """Validate what a person typed (an admin API body, a portal form, a ``mirbad args`` file).

        Unlike :meth:`from_wire`, an unknown field at any depth is refused, with the nearest real name
        (``maxModelLenn``: did you mean ``maxModelLen``?), and the user-input limits apply. Free-form
        maps (``extraArgs``, ``compilationConfig``, vLLM's own speculative keys) stay free-form.

        Raises:
            InvalidFieldError: naming the first bad field in its wire spelling.
        """
        try:
            model = cls.model_validate(data, extra="forbid", context={USER_INPUT: True})
        except ValidationError as exc:
            raise field_error_from_validation(exc, model=cls) from None
        check_storable_text(model.model_dump(by_alias=True))
        return model

    @classmethod
    def from_user_json(cls, text: str | bytes) -> Self:
        """Like :meth:`from_user_input`, for a JSON document.

        Raises:
            InvalidFieldError: naming the first bad field, or ``(document)`` for JSON that is not.
        """
        try:
            model = cls.model_validate_json(text, extra="forbid", context={USER_INPUT: True})
        except ValidationError as exc:
            raise field_error_from_validation(exc, model=cls) from None
        check_storable_text(model.model_dump(by_alias=True))
        return model


def field_error_from_validation(
    exc: ValidationError, *, model: type[BaseModel] | None = None
) -> InvalidFieldError:
    """Turn pydantic's first error into an :class:`InvalidFieldError` with a dotted wire path.

    Args:
        exc: pydantic's error.
        model: the model validated; with it an unknown field's reason names the nearest real field.
    """
    errors = exc.errors(include_url=False)
    # A misspelled required field is also "missing": the unknown spelling is the cause, name it first.
    first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    path = ".".join(str(part) for part in first["loc"])
    if first["type"] == "extra_forbidden":
        known = _wire_names_at(model, first["loc"][:-1]) if model is not None else ()
        return InvalidFieldError(path, unknown_field_reason(str(first["loc"][-1]), known))
    inner = first.get("ctx", {}).get("error")
    if isinstance(inner, InvalidFieldError):
        # A validator that names a field of its own (a key inside a free-form object) keeps that name.
        return InvalidFieldError(".".join(filter(None, (path, inner.field))), inner.reason)
    message = first["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
    if not path:
        # A whole-model check names its field as the message's first word ("image: ...").
        named = re.fullmatch(r"([A-Za-z][\w.]*): (.+)", message, re.DOTALL)
        path, message = (named.group(1), named.group(2)) if named else ("(document)", message)
    if first["type"] == "json_invalid":
        return InvalidFieldError("(document)", f"not valid JSON: {first['ctx'].get('error', message)}")
    return InvalidFieldError(path, message[0].lower() + message[1:] if message else "invalid value")


def _wire_names_at(model: type[BaseModel], location: Sequence[int | str]) -> list[str]:
    """The wire names of the model found at ``location`` (list indexes skipped) below ``model``."""
    current: type[BaseModel] | None = model
    for part in location:
        if isinstance(part, int) or current is None:
            continue
        field = next((f for n, f in current.model_fields.items() if part in (n, f.alias)), None)
        current = _model_in(field.annotation) if field is not None else None
    if current is None:
        return []
    return [field.alias or name for name, field in current.model_fields.items()]


def _model_in(annotation: object) -> type[BaseModel] | None:
    """The pydantic model inside an annotation such as ``list[ModelSource]`` or ``Placement | None``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next(filter(None, (_model_in(arg) for arg in typing.get_args(annotation))), None)
