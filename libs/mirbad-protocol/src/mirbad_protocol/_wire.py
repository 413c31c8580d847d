"""The base class of every wire model: camelCase on the wire, snake_case in Python."""

from __future__ import annotations

import re
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, ValidationError, model_serializer
from pydantic.alias_generators import to_camel

from .exceptions import InvalidFieldError

__all__ = ["WireModel", "field_error_from_validation"]


class WireModel(BaseModel):
    """A frozen pydantic model with the wire conventions of the agent contract.

    Unknown fields are ignored so an older peer reads a newer peer's payload; :meth:`to_wire` omits
    fields at their default so a newer peer's additive fields never reach an older one.
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

    @model_serializer(mode="wrap")
    def _keep_kind(self, handler: SerializerFunctionWrapHandler) -> Any:
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


def field_error_from_validation(exc: ValidationError) -> InvalidFieldError:
    """Turn pydantic's first error into an :class:`InvalidFieldError` with a dotted wire path."""
    first = exc.errors(include_url=False)[0]
    path = ".".join(str(part) for part in first["loc"])
    message = first["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
    if not path:
        # A whole-model check names its field as the message's first word ("image: ...").
        named = re.fullmatch(r"([A-Za-z][\w.]*): (.+)", message, re.DOTALL)
        path, message = (named.group(1), named.group(2)) if named else ("(document)", message)
    if first["type"] == "json_invalid":
        return InvalidFieldError("(document)", f"not valid JSON: {first['ctx'].get('error', message)}")
    return InvalidFieldError(path, message[0].lower() + message[1:] if message else "invalid value")
