"""The most tokens a /v1 request can use, known before it is sent, and its length fields fitted to that.

A key's token limit reserves the request's bound when it is admitted: the prompt's estimate plus the most
the model may generate. The estimate only has to be close: when the response ends, its real usage
replaces the reservation in the key's window. What the model may generate is only bounded if the model
server obeys it, and each server has its own spellings of the length (llama.cpp's ``n_predict`` wins over
``max_tokens``): so the router reads every spelling the servers it drives know (llama.cpp, vLLM, MLX) and,
for a key with a token limit, writes each one back no larger than what the reservation holds
(:func:`fit_output_to`), adding the endpoint's standard field when the request had none.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final

from ._body import RequestBody

__all__ = ["fit_output_to", "request_token_bound", "request_token_floor"]


@dataclass(frozen=True)
class _Lengths:
    """An endpoint's length fields: the one always written, the others capped when present."""

    standard: str
    capped: tuple[str, ...]

    @property
    def all(self) -> tuple[str, ...]:
        return (self.standard, *self.capped)


# The fields that cap generation, per endpoint: OpenAI's, llama.cpp's `n_predict` (it overrides the
# others there), and what vLLM and MLX read. Any of them present bounds the output by its value.
_OUTPUT_LIMITS: Final = {
    "chat/completions": _Lengths("max_tokens", ("max_completion_tokens", "n_predict")),
    "completions": _Lengths("max_tokens", ("max_completion_tokens", "n_predict")),
    "responses": _Lengths("max_output_tokens", ("max_tokens", "n_predict")),
    "messages": _Lengths("max_tokens", ("n_predict",)),
}
# Fields that force generation to go on (vLLM's `min_tokens`): never more than the output allowed.
_OUTPUT_FLOORS: Final = ("min_tokens",)
# How many sequences a request generates: OpenAI's `n`, and vLLM's `best_of` (it generates them all).
_CHOICES: Final = ("n", "best_of")


def request_token_bound(
    path: str, body: RequestBody, context_tokens: int | None = None, *, tokens_per_byte: float = 0.25
) -> int | None:
    """The most prompt plus completion tokens the request to ``path`` can use, or None if unknown.

    For chat and text completions, the Responses API and Anthropic's messages that is the prompt
    estimate (``tokens_per_byte`` times the body's bytes) plus ``n`` times the smallest of the request's
    length fields (``max_completion_tokens``, ``max_tokens``, ``max_output_tokens``, ``n_predict``);
    without one, ``n`` times the model's context (``context_tokens``). Other endpoints (embeddings,
    say) generate nothing: their bound is the estimate.

    Args:
        path: the endpoint below ``/v1`` (``chat/completions``).
        body: the request body as the router read it.
        context_tokens: the model's context length, when the resolver knows it.
        tokens_per_byte: the prompt tokens per body byte to estimate with (see :class:`PromptScale`).

    Returns:
        The bound, or None for a body that is not a JSON object (multipart audio) or a generating
        request without an output limit on a model whose context is unknown.
    """
    if not body.content:
        return 0
    if body.json is None:
        return None
    prompt = _prompt_estimate(body, tokens_per_byte)
    lengths = _OUTPUT_LIMITS.get(path.strip("/"))
    if lengths is None:
        return prompt
    choices = _choices(body.json)
    output = _requested_output(body.json, lengths)
    if output is not None:
        return prompt + choices * output
    return None if context_tokens is None else choices * context_tokens


def request_token_floor(path: str, body: RequestBody, *, tokens_per_byte: float = 0.25) -> int:
    """The fewest tokens the request to ``path`` needs free to be worth sending.

    A generating request needs its prompt estimate plus one token per sequence: with less, the model
    could not write a token without the key passing its limit. Anything else needs one token.
    """
    if body.json is None or path.strip("/") not in _OUTPUT_LIMITS:
        return 1
    return _prompt_estimate(body, tokens_per_byte) + _choices(body.json)


def fit_output_to(
    path: str, body: RequestBody, reserved: int, *, tokens_per_byte: float = 0.25
) -> dict[str, Any] | None:
    """``body`` with every length field at most what ``reserved`` tokens leave for the output.

    The output allowed is the reservation less the prompt estimate, shared by the sequences. The
    endpoint's standard field (``max_tokens``, or ``max_output_tokens`` for the Responses API) is
    always written; the other length fields are written when present and larger, or not a whole
    number (a server may read ``"4540"`` or ``-1`` as no bound at all).

    Returns:
        The new body, or None when nothing needs to change: the endpoint generates nothing, the body
        is not a JSON object, or its fields fit already.
    """
    lengths = _OUTPUT_LIMITS.get(path.strip("/"))
    if lengths is None or body.json is None:
        return None
    allowed = max(1, (reserved - _prompt_estimate(body, tokens_per_byte)) // _choices(body.json))
    fitted = dict(body.json)
    for name in lengths.all:
        if name == lengths.standard or name in fitted:
            value = _positive(fitted.get(name))
            fitted[name] = allowed if value is None else min(value, allowed)
    # A floor above the length is an error on vLLM, never a longer answer; it goes down all the same.
    ceiling = min(fitted[name] for name in lengths.all if name in fitted)
    for name in _OUTPUT_FLOORS:
        if name in fitted:
            value = _whole(fitted[name])
            fitted[name] = ceiling if value is None else max(0, min(value, ceiling))
    return None if fitted == body.json else fitted


def generates_output(path: str) -> bool:
    """Whether ``path`` is an endpoint whose length the router fits (an answer from it reports usage)."""
    return path.strip("/") in _OUTPUT_LIMITS


def _prompt_estimate(body: RequestBody, tokens_per_byte: float) -> int:
    return math.ceil(len(body.content) * tokens_per_byte)


def _choices(payload: dict[str, Any]) -> int:
    return max((_positive(payload.get(name)) or 1 for name in _CHOICES), default=1)


def _requested_output(payload: dict[str, Any], lengths: _Lengths) -> int | None:
    present = [limit for name in lengths.all if (limit := _positive(payload.get(name))) is not None]
    return min(present, default=None)


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
