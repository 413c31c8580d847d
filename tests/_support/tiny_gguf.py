"""The tiny random-weight llama GGUF the tests serve: the product's demo model (``mirbad demo``).

The writer lives in :mod:`mirbad_master` so a machine with no hub gets the same model the tests run
against; this module only re-exports it under the names the tests have always used.
"""

from __future__ import annotations

from mirbad_master.demo import CHATML_TEMPLATE, TINY, TINY_MODEL_PATH, TinyLlama, write_tiny_gguf

__all__ = ["CHATML_TEMPLATE", "TINY", "TINY_MODEL_PATH", "TinyLlama", "write_tiny_gguf"]
