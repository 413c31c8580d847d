"""Fixtures of the runtime tests: the tiny llama GGUF, written once per session."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests._support.tiny_gguf import TINY_MODEL_PATH, write_tiny_gguf


@pytest.fixture(scope="session")
def model_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model root holding the tiny model at :data:`TINY_MODEL_PATH`."""
    root = tmp_path_factory.mktemp("models")
    write_tiny_gguf(root / TINY_MODEL_PATH, seed=0)
    return root


@pytest.fixture(scope="session")
def tiny_gguf(model_root: Path) -> Path:
    """The tiny llama GGUF file (read-only: copy it before changing it)."""
    return model_root / TINY_MODEL_PATH
