"""The demo model ``mirbad demo`` writes, for tools and tests that need the same tiny GGUF."""

from __future__ import annotations

from ._demo_model import (
    CHATML_TEMPLATE,
    DEMO_MODEL_ID,
    TINY,
    TINY_MODEL_PATH,
    TinyLlama,
    demo_definition,
    write_tiny_gguf,
)

__all__ = [
    "CHATML_TEMPLATE",
    "DEMO_MODEL_ID",
    "TINY",
    "TINY_MODEL_PATH",
    "TinyLlama",
    "demo_definition",
    "write_tiny_gguf",
]
