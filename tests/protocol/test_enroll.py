"""The enrollment contract: the join-token format and the enroll bodies."""

from __future__ import annotations

import base64
import hashlib
import secrets

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirbad_protocol import InvalidFieldError
from mirbad_protocol.pki import (
    JOIN_TOKEN_PREFIX,
    CertificateAuthority,
    EnrollErrorBody,
    EnrollErrorCode,
    EnrollRequest,
    EnrollResponse,
    JoinToken,
    enroll_error_body,
)

PINS = st.binary(min_size=32, max_size=32).map(lambda digest: base64.b64encode(digest).decode())
SECRETS = st.text(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", min_size=32, max_size=128
)
SECRET = "s" * 43


@given(PINS, SECRETS)
def test_a_join_token_reads_back_as_written(pin: str, secret: str) -> None:
    token = JoinToken(pin, secret)

    text = token.encode()

    assert JoinToken.parse(text) == token
    assert JoinToken.parse(f"  {text}\n") == token
    assert JoinToken.is_join_token(text)
    prefix, pin_part, secret_part = text.split(".")
    assert (prefix, len(pin_part), secret_part) == (JOIN_TOKEN_PREFIX, 43, secret)


def test_a_join_token_carries_the_ca_pin_in_base64url() -> None:
    ca = CertificateAuthority.create("join token test")
    secret = secrets.token_urlsafe(32)

    text = str(JoinToken(ca.pin, secret))

    digest = base64.urlsafe_b64decode(text.split(".")[1] + "=")
    assert base64.b64encode(digest).decode() == ca.pin
    assert not set("=+/") & set(text)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "copy it whole"),
        (SECRET, "copy it whole"),
        (f"mbj2.{'A' * 43}.{SECRET}", "copy it whole"),
        (f"mbj1.{'A' * 43}", "copy it whole"),
        (f"mbj1.{'A' * 43}.{SECRET}.extra", "copy it whole"),
        (f"mbj1.{'A' * 42}.{SECRET}", "43 base64url characters"),
        (f"mbj1.{'A' * 42}+.{SECRET}", "43 base64url characters"),
        (f"mbj1.{'A' * 43}.short", "32 to 128"),
        (f"mbj1.{'A' * 43}.{'s' * 42}!", "32 to 128"),
    ],
)
def test_a_malformed_join_token_names_the_token_field(text: str, reason: str) -> None:
    with pytest.raises(InvalidFieldError, match=reason) as refused:
        JoinToken.parse(text)

    assert refused.value.field == "token"


def test_a_pin_that_is_no_digest_is_refused() -> None:
    with pytest.raises(InvalidFieldError, match="SHA-256"):
        JoinToken(base64.b64encode(hashlib.sha1(b"x").digest()).decode(), SECRET)


def test_a_bare_secret_is_no_join_token() -> None:
    assert not JoinToken.is_join_token(secrets.token_urlsafe(32))


def test_enroll_bodies_are_camel_case_on_the_wire() -> None:
    answer = EnrollResponse(node_name="gpu-1", certificate="C", ca_certificate="CA")

    assert answer.to_wire() == {"nodeName": "gpu-1", "certificate": "C", "caCertificate": "CA"}
    assert EnrollRequest.from_wire({"token": "t", "csr": "c", "future": 1}) == EnrollRequest(
        token="t", csr="c"
    )
    with pytest.raises(InvalidFieldError) as refused:
        EnrollRequest.from_wire({"token": "t"})
    assert refused.value.field == "csr"


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (EnrollErrorCode.INVALID_REQUEST, 400),
        (EnrollErrorCode.CSR_REJECTED, 400),
        (EnrollErrorCode.TOKEN_UNKNOWN, 401),
        (EnrollErrorCode.TOKEN_USED, 409),
        (EnrollErrorCode.TOKEN_EXPIRED, 410),
        (EnrollErrorCode.NODE_CONFLICT, 409),
        (EnrollErrorCode.REQUEST_TOO_LARGE, 413),
        (EnrollErrorCode.INTERNAL_ERROR, 500),
    ],
)
def test_each_refusal_code_has_its_status(code: EnrollErrorCode, status: int) -> None:
    assert code.http_status == status
    body = enroll_error_body(code, "why")
    assert body == {"error": {"code": code.value, "message": "why"}}
    assert EnrollErrorBody.from_wire(body).error.code == code.value
