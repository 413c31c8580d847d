"""Fixtures for the download tests: a tiny GGUF and the loopback hub and registry that serve it.

The runtime's download manager and the agent's download routes are tested against the same sources, so
their set-up lives here once (registered in ``tests/conftest.py``). A file that needs more on the hub
overrides ``servers`` by name and asks for this one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from tests._support.model_hub import Sources, loopback_sources
from tests._support.tiny_gguf import write_tiny_gguf

__all__ = ["gguf_bytes", "servers"]


@pytest.fixture(scope="module")
def gguf_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The bytes of a tiny valid GGUF, made once per test file."""
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf").read_bytes()


@pytest.fixture
async def servers(gguf_bytes: bytes) -> AsyncIterator[Sources]:
    """A fresh loopback hub and registry for one test (see :func:`loopback_sources`)."""
    async with loopback_sources(gguf_bytes) as sources:
        yield sources
