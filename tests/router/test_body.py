"""The model field of JSON and multipart/form-data bodies."""

from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirbad_router import InvalidRequestBodyError, RequestBody, parse_request_body


def _multipart(fields: dict[str, str], files: dict[str, bytes]) -> tuple[str, bytes]:
    request = httpx.Request(
        "POST",
        "http://x/",
        data=fields,
        files={name: ("a.wav", data, "audio/wav") for name, data in files.items()},
    )
    return request.headers["content-type"], request.read()


def test_json_body() -> None:
    content = json.dumps({"model": "Qwen", "messages": []}).encode()
    assert parse_request_body("application/json", content) == RequestBody(
        content, "Qwen", {"model": "Qwen", "messages": []}
    )


def test_json_without_a_content_type_or_a_string_model() -> None:
    assert parse_request_body(None, b'{"model": "m"}').model == "m"
    assert parse_request_body("application/json", b'{"model": 3}').model is None
    assert parse_request_body("application/json", b"[1]") == RequestBody(b"[1]", None)
    assert parse_request_body("application/json", b"") == RequestBody(b"", None)


def test_invalid_json_is_an_error() -> None:
    with pytest.raises(InvalidRequestBodyError, match="not valid JSON"):
        parse_request_body("application/json", b"{model")


@pytest.mark.parametrize(
    "content",
    [b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 100_000 + b"1" + b"}" * 100_000],
    ids=["arrays", "objects"],
)
def test_deeply_nested_json_is_an_error_not_a_recursion_error(content: bytes) -> None:
    with pytest.raises(InvalidRequestBodyError, match="nested too deeply"):
        parse_request_body("application/json", content)


def test_multipart_model_before_or_after_a_large_file() -> None:
    audio = bytes(range(256)) * 20_000  # ~5 MiB: fed in slices
    content_type, content = _multipart({"model": "whisper-small", "language": "en"}, {"file": audio})
    body = parse_request_body(content_type, content)
    assert (body.model, body.json, body.content) == ("whisper-small", None, content)
    request = httpx.Request(
        "POST", "http://x/", files=[("file", ("a.wav", audio, "audio/wav")), ("model", (None, b"late"))]
    )
    assert parse_request_body(request.headers["content-type"], request.read()).model == "late"


def test_multipart_without_a_model_field_or_boundary() -> None:
    content_type, content = _multipart({"language": "en"}, {"model": b"a file named model is not the field"})
    assert parse_request_body(content_type, content).model is None
    with pytest.raises(InvalidRequestBodyError, match="no boundary"):
        parse_request_body("multipart/form-data", content)


def test_malformed_multipart_is_an_error() -> None:
    with pytest.raises(InvalidRequestBodyError, match="malformed"):
        parse_request_body("multipart/form-data; boundary=abc", b"garbage without the boundary\r\n")


@given(st.text(min_size=1, max_size=60).filter(lambda s: "\r" not in s and "\n" not in s))
def test_any_model_name_survives_both_encodings(name: str) -> None:
    assert parse_request_body("application/json", json.dumps({"model": name}).encode()).model == name
    content_type, content = _multipart({"model": name}, {"file": b"RIFF"})
    assert parse_request_body(content_type, content).model == name


@pytest.mark.parametrize(
    ("content", "param"),
    [
        (b'{"model": "\\ud800"}', "model"),
        (b'{"model": "m", "messages": [{"role": "user", "content": "a\\uDFFFb"}]}', "messages[0].content"),
        ('{"model": "m", "\udbff": 1}'.encode("utf-8", "surrogatepass"), "\\udbff"),
        (b'"\\udc00"', None),
    ],
    ids=["model", "nested-value", "key-as-cesu-bytes", "bare-string"],
)
def test_a_lone_surrogate_anywhere_is_an_error_naming_the_field(content: bytes, param: str | None) -> None:
    with pytest.raises(InvalidRequestBodyError, match="lone UTF-16 surrogate") as raised:
        parse_request_body("application/json", content)
    assert raised.value.param == param
    str(raised.value).encode("utf-8")  # the message itself can be sent


def test_a_surrogate_pair_is_one_character_and_passes() -> None:
    body = parse_request_body("application/json", b'{"model": "\\ud83d\\ude00"}')
    assert body.model == "\N{GRINNING FACE}"


# Every code point, lone surrogates included (drawn often: they are rare among all code points).
_ANY_CHARACTER = st.characters(codec=None, categories=None) | st.sampled_from("\ud800\udbff\udc00\udfff")
_JSON_VALUES = st.recursive(
    st.none() | st.integers() | st.text(_ANY_CHARACTER, max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(_ANY_CHARACTER, max_size=3), inner),
    max_leaves=10,
)


@given(st.dictionaries(st.text(_ANY_CHARACTER, max_size=3), _JSON_VALUES, max_size=4))
def test_a_parsed_body_holds_only_encodable_text(payload: dict[str, object]) -> None:
    content = json.dumps(payload).encode()  # ASCII, with \\uXXXX escapes for surrogates
    text = json.dumps(payload, ensure_ascii=False)
    if any(0xD800 <= ord(character) <= 0xDFFF for character in text):
        with pytest.raises(InvalidRequestBodyError, match="surrogate"):
            parse_request_body("application/json", content)
    else:
        body = parse_request_body("application/json", content)
        assert json.dumps(body.json, ensure_ascii=False) == text
