"""The master's router adapters: what the fleet tells the embedded /v1 router about a model."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.master._stack import running_master

from mirbad_protocol import ModelDefinition

pytestmark = pytest.mark.anyio


async def test_a_resolution_carries_the_models_context_for_token_reservations(tmp_path: Path) -> None:
    definition = ModelDefinition(id="short", served_name="Short", model_path="s", max_model_len=2048)
    async with running_master(tmp_path) as master:
        await master.services.models.upsert(definition)
        resolution = await master.services.resolver.resolve("short")

    # Without max_tokens, a token-limited key reserves the whole context (mirbad_router's bound).
    assert resolution is not None
    assert (resolution.model_id, resolution.context_tokens) == ("short", 2048)
