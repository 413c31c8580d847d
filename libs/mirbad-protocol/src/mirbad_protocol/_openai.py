"""The OpenAI error shape every /v1 error answers with, so OpenAI clients raise their usual exceptions."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

__all__ = ["OpenAIError", "OpenAIErrorBody", "openai_error"]


class OpenAIError(BaseModel):
    """The inner object: ``{"message", "type", "param", "code"}`` (param and code may be null)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    message: str
    type: str = "invalid_request_error"
    param: str | None = None
    code: str | None = None


class OpenAIErrorBody(BaseModel):
    """The whole body: ``{"error": {...}}``."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    error: OpenAIError


def openai_error(
    message: str, *, code: str | None = None, type: str = "invalid_request_error", param: str | None = None
) -> dict[str, Any]:
    """Return the JSON body of an OpenAI-style error (every key present, as OpenAI sends them)."""
    body = OpenAIErrorBody(error=OpenAIError(message=message, type=type, param=param, code=code))
    return body.model_dump(mode="json")
