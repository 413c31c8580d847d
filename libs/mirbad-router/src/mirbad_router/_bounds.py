"""The most tokens a /v1 request can use, known before it is sent: what a key's token limit reserves.

The bound is the prompt's estimate plus the most the model may generate. The estimate only has to be
close: when the response ends, its real usage replaces the reservation in the key's window.
"""

from __future__ import annotations

import math
from typing import Any, Final

from ._body import RequestBody

__all__ = ["request_token_bound"]

# The fields that cap generation, per endpoint, in the order OpenAI gives them precedence.
_OUTPUT_LIMITS: Final = {
    "chat/completions": ("max_completion_tokens", "max_tokens"),
    "completions": ("max_tokens",),
    "responses": ("max_output_tokens",),
}
# Tokenizers of current models average about four bytes of English per token; the JSON around the
# text makes the body a generous stand-in for the prompt.
_BYTES_PER_TOKEN: Final = 4


def request_token_bound(path: str, body: RequestBody, context_tokens: int | None = None) -> int | None:
    """The most prompt plus completion tokens the request to ``path`` can use, or None if unknown.

    For chat and text completions and the Responses API that is the prompt estimate (a quarter of the
    body's bytes) plus ``n`` times the request's ``max_completion_tokens``, ``max_tokens`` or
    ``max_output_tokens``; without one, ``n`` times the model's context (``context_tokens``). Other
    endpoints (embeddings, say) generate nothing: their bound is the estimate.

    Args:
        path: the endpoint below ``/v1`` (``chat/completions``).
        body: the request body as the router read it.
        context_tokens: the model's context length, when the resolver knows it.

    Returns:
        The bound, or None for a body that is not a JSON object (multipart audio) or a generating
        request without an output limit on a model whose context is unknown.
    """
    if not body.content:
        return 0
    if body.json is None:
        return None
    prompt = math.ceil(len(body.content) / _BYTES_PER_TOKEN)
    fields = _OUTPUT_LIMITS.get(path.strip("/"))
    if fields is None:
        return prompt
    choices = _positive(body.json.get("n")) or 1
    output = next((limit for name in fields if (limit := _positive(body.json.get(name))) is not None), None)
    if output is not None:
        return prompt + choices * output
    return None if context_tokens is None else choices * context_tokens


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
