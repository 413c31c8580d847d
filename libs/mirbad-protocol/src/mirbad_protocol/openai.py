"""mirbad_protocol.openai: the OpenAI error shape every ``/v1`` error answers with (the router's side)."""

from ._openai import OpenAIError, OpenAIErrorBody, openai_error

__all__ = [
    "OpenAIError",
    "OpenAIErrorBody",
    "openai_error",
]
