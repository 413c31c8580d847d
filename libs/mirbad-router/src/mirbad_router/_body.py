"""The ``model`` field of a /v1 request, read from a JSON body or a multipart/form-data body."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import python_multipart
from python_multipart.exceptions import FormParserError
from python_multipart.multipart import parse_options_header

from .exceptions import InvalidRequestBodyError

if TYPE_CHECKING:
    from python_multipart.multipart import MultipartCallbacks

__all__ = ["RequestBody", "parse_request_body"]

# Model names are short; a longer `model` form field is not a model name, so it is not held in memory.
_MAX_MODEL_FIELD_BYTES = 4096
# Only a body with a \uD800-\uDFFF escape (or such a code point in CESU-8 bytes, which json.loads
# also decodes) can hold a lone surrogate; any other body skips the walk.
_MAY_HOLD_SURROGATES = re.compile(rb"\\u[dD][89abcdefABCDEF]|\xed[\xa0-\xbf]")
# The multipart parser is fed in slices so it can stop at the `model` field, usually before the audio.
_MULTIPART_SLICE_BYTES = 1 << 20


@dataclass(frozen=True)
class RequestBody:
    """A request body as the router forwards it, with what it read from it.

    Attributes:
        content: the bytes as the client sent them.
        model: the ``model`` field when there is one and it is a string.
        json: the decoded body when it is a JSON object (so the router can add to it), else None.
    """

    content: bytes
    model: str | None
    json: dict[str, Any] | None = None


def parse_request_body(content_type: str | None, content: bytes) -> RequestBody:
    """Read the ``model`` field of ``content``, sent with the ``Content-Type`` ``content_type``.

    A multipart/form-data body (audio transcriptions and translations) is scanned for its ``model``
    form field. Any other non-empty body is read as JSON, whatever its content type says, since some
    clients send JSON without one.

    Raises:
        InvalidRequestBodyError: the body is neither valid JSON nor valid multipart/form-data.
    """
    if not content:
        return RequestBody(content, None)
    media_type, options = parse_options_header(content_type or "")
    if media_type == b"multipart/form-data":
        return RequestBody(content, _multipart_model(options.get(b"boundary"), content))
    try:
        decoded = json.loads(content)
    except ValueError as error:
        raise InvalidRequestBodyError(f"the request body is not valid JSON: {error}") from None
    except RecursionError:
        # The decoder recurses once per nesting level; no OpenAI request is nested that deep.
        raise InvalidRequestBodyError("the request body is JSON nested too deeply") from None
    if _MAY_HOLD_SURROGATES.search(content) is not None:
        _refuse_lone_surrogates(decoded)
    if not isinstance(decoded, dict):
        return RequestBody(content, None)
    model = decoded.get("model")
    return RequestBody(content, model if isinstance(model, str) else None, decoded)


def _refuse_lone_surrogates(decoded: object) -> None:
    # JSON may spell half of a UTF-16 pair alone ("\ud800"), and Python decodes it to a string that
    # cannot be encoded as UTF-8 again: the error answer naming such a model, a log line or the model
    # server would fail on it. Walked without recursion: the body may be nested about a thousand deep.
    pending: list[tuple[str, object]] = [("", decoded)]
    while pending:
        where, value = pending.pop()
        if isinstance(value, str):
            _check_text(value, where)
        elif isinstance(value, dict):
            for name, item in value.items():
                path = f"{where}.{name}" if where else name
                _check_text(name, path)
                pending.append((path, item))
        elif isinstance(value, list):
            pending.extend((f"{where}[{index}]", item) for index, item in enumerate(value))


def _check_text(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # A field name may hold the surrogate itself: the answer names it escaped.
        field = where.encode("utf-8", "backslashreplace").decode("utf-8")
        raise InvalidRequestBodyError(
            f"'{field or 'the body'}' holds a lone UTF-16 surrogate, which is not text", param=field or None
        ) from None


def _multipart_model(boundary: bytes | None, content: bytes) -> str | None:
    if not boundary:
        raise InvalidRequestBodyError("the multipart/form-data body has no boundary in its Content-Type")
    finder = _FormFieldFinder(b"model")
    parser = python_multipart.MultipartParser(boundary, finder.callbacks())
    try:
        for start in range(0, len(content), _MULTIPART_SLICE_BYTES):
            parser.write(content[start : start + _MULTIPART_SLICE_BYTES])
            if finder.value is not None:
                break
        else:
            parser.finalize()
    except FormParserError as error:
        raise InvalidRequestBodyError(f"the multipart/form-data body is malformed: {error}") from None
    if finder.value is None:
        return None
    return finder.value.decode("utf-8", "replace")


class _FormFieldFinder:
    """Parser callbacks that keep one plain (non-file) form field and skip everything else."""

    def __init__(self, name: bytes) -> None:
        self.value: bytes | None = None
        self._name = name
        self._header_name = bytearray()
        self._header_value = bytearray()
        self._in_field = False
        self._data = bytearray()

    def callbacks(self) -> MultipartCallbacks:
        return {
            "on_part_begin": self._part_begin,
            "on_header_field": self._header_field,
            "on_header_value": self._header_value_data,
            "on_header_end": self._header_end,
            "on_part_data": self._part_data,
            "on_part_end": self._part_end,
        }

    def _part_begin(self) -> None:
        self._in_field = False
        self._data.clear()

    def _header_field(self, data: bytes, start: int, end: int) -> None:
        self._header_name += data[start:end]

    def _header_value_data(self, data: bytes, start: int, end: int) -> None:
        self._header_value += data[start:end]

    def _header_end(self) -> None:
        if bytes(self._header_name).lower() == b"content-disposition":
            _, options = parse_options_header(bytes(self._header_value))
            self._in_field = options.get(b"name") == self._name and b"filename" not in options
        self._header_name.clear()
        self._header_value.clear()

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        if self._in_field and len(self._data) <= _MAX_MODEL_FIELD_BYTES:
            self._data += data[start:end]

    def _part_end(self) -> None:
        if self._in_field and self.value is None and len(self._data) <= _MAX_MODEL_FIELD_BYTES:
            self.value = bytes(self._data)
        self._in_field = False
