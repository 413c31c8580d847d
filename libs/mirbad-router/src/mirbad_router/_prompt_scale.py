"""How many prompt tokens a model makes of a request body's bytes, learned from the usage it reports.

A key's token limit reserves the prompt before it is sent, from the body's size alone. A quarter of the
bytes suits current tokenizers on English text, but a model whose tokenizer splits finer (byte-level
vocabularies, code, scripts other than Latin) reads more tokens than that, and a reservation that falls
short lets the key pass its limit by the difference. So the router keeps, per model, the highest ratio of
reported prompt tokens to body bytes it has seen, and estimates with that (never below a quarter, never
above one token per byte, which no tokenizer exceeds on the text itself).
"""

from __future__ import annotations

import threading
from typing import Final

__all__ = ["PromptScale"]

_DEFAULT_TOKENS_PER_BYTE: Final = 0.25
_MOST_TOKENS_PER_BYTE: Final = 1.0


class PromptScale:
    """Tokens per body byte, per served model: the highest ratio its answers have shown.

    Safe to share between tasks and threads; it holds one number per model that ever answered.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ratios: dict[str, float] = {}

    def tokens_per_byte(self, served_name: str) -> float:
        """The ratio to estimate ``served_name``'s prompts with (a quarter until it has answered)."""
        return self._ratios.get(served_name, _DEFAULT_TOKENS_PER_BYTE)

    def learn(self, served_name: str, body_bytes: int, prompt_tokens: int) -> None:
        """Note that a body of ``body_bytes`` bytes made ``prompt_tokens`` prompt tokens."""
        if body_bytes <= 0 or prompt_tokens <= 0:
            return
        ratio = min(prompt_tokens / body_bytes, _MOST_TOKENS_PER_BYTE)
        with self._lock:
            if ratio > self._ratios.get(served_name, _DEFAULT_TOKENS_PER_BYTE):
                self._ratios[served_name] = ratio
