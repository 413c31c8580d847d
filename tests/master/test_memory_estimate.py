"""Admission's llama.cpp memory estimate at save: a budget below it is refused, naming memoryBudgetGiB.

The GGUF header is a real one (the tiny test model written and read by the runtime's reader), answered
by the fake node's ``/gguf/inspect``; the master, its API and its portal are real.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from nicegui import ui
from tests._support.tiny_gguf import TINY, TINY_MODEL_PATH, write_tiny_gguf
from tests.master._stack import Master, running_master
from tests.master.test_api import error_of
from tests.master.test_ui_pages import portal_user
from tests.orchestration._fake_agent import FakeAgent

from mirbad_master.models._memory_estimate import ESTIMATE_SLACK_GIB, estimated_gib
from mirbad_protocol import ModelDefinition
from mirbad_protocol.agent import FeatureFlag, GgufInfo
from mirbad_runtime import read_gguf_info

pytestmark = pytest.mark.anyio

MODEL: dict[str, Any] = {
    "id": "tiny-cpp",
    "servedName": "tiny-cpp",
    "runtime": "llamacpp",
    "executable": {"name": "llama-server", "version": "b6000"},
    "modelPath": TINY_MODEL_PATH,
    "maxModelLen": TINY.context,
    "maxNumSeqs": 1,
    "memoryBudgetGiB": 0.25,
}


@pytest.fixture(scope="module")
def header(tmp_path_factory: pytest.TempPathFactory) -> GgufInfo:
    return read_gguf_info(write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf"))


@pytest.fixture
def estimate(header: GgufInfo) -> str:
    """The estimate as a refusal names it: rounded up to 0.01 GiB."""
    found = estimated_gib(ModelDefinition.model_validate(MODEL), header)
    assert found is not None
    return f"{math.ceil(found * 100) / 100:g}"


def _node(header: GgufInfo, *, inspects: bool = True) -> FakeAgent:
    features = [FeatureFlag.GGUF_INSPECT.value] if inspects else []
    return FakeAgent(node_name="local", gguf={TINY_MODEL_PATH: header}, download_features=features)


@pytest.fixture
async def master(tmp_path: Path, header: GgufInfo) -> AsyncIterator[Master]:
    async with running_master(tmp_path, agent=lambda _: _node(header)) as started:
        yield started


async def test_a_budget_below_the_estimate_is_refused_at_save_naming_it(
    master: Master, estimate: str
) -> None:
    low = await master.admin.post("/api/models", json={**MODEL, "memoryBudgetGiB": 0.1})
    error = error_of(low, 400, "invalid_request")
    enough = await master.admin.post("/api/models", json=MODEL)
    lowered = await master.admin.put("/api/models/tiny-cpp", json={**MODEL, "memoryBudgetGiB": 0.1})

    assert error["field"] == "memoryBudgetGiB"
    assert f"estimate of {estimate} GiB" in error["message"]
    assert TINY_MODEL_PATH in error["message"]
    assert enough.status_code == 201, enough.text  # 0.25 GiB: within the allowance's slack of 0.2515
    assert error_of(lowered, 400, "invalid_request")["field"] == "memoryBudgetGiB"
    assert (await master.services.models.get("tiny-cpp")).memory_budget_gib == 0.25


async def test_a_longer_context_raises_the_estimate_past_the_same_budget(master: Master) -> None:
    many = await master.admin.post("/api/models", json={**MODEL, "maxModelLen": 131072})

    assert error_of(many, 400, "invalid_request")["field"] == "memoryBudgetGiB"


async def test_what_cannot_be_estimated_is_saved_unchecked(tmp_path: Path, header: GgufInfo) -> None:
    elsewhere = {**MODEL, "modelPath": "not-downloaded/model.gguf", "memoryBudgetGiB": 0.1}
    vllm = {"id": "qwen", "servedName": "qwen", "modelPath": TINY_MODEL_PATH, "memoryBudgetGiB": 0.1}
    async with running_master(tmp_path, agent=lambda _: _node(header)) as master:
        not_there = await master.admin.post("/api/models", json=elsewhere)
        other_runtime = await master.admin.post("/api/models", json=vllm)
    async with running_master(tmp_path / "old", agent=lambda _: _node(header, inspects=False)) as master:
        old_agent = await master.admin.post("/api/models", json={**MODEL, "memoryBudgetGiB": 0.1})

    assert not_there.status_code == 201, not_there.text  # the file is not downloaded yet
    assert other_runtime.status_code == 201, other_runtime.text
    assert old_agent.status_code == 201, old_agent.text  # an agent that cannot read headers


def test_the_slack_is_the_compute_allowances_uncertainty_not_a_share_of_the_model() -> None:
    assert ESTIMATE_SLACK_GIB * 1024 == 64


async def test_the_editor_shows_the_refusal_under_the_budget(master: Master, estimate: str) -> None:
    (await master.admin.post("/api/models", json=MODEL)).raise_for_status()
    async with portal_user(master) as user:
        await user.open("/models/tiny-cpp/edit")
        user.find(marker="field-memoryBudgetGiB").clear().type("0.1")
        user.find(marker="save-model").click()
        await user.should_see(marker="field-memoryBudgetGiB", content=f"estimate of {estimate} GiB")
        (budget,) = user.find(marker="field-memoryBudgetGiB").elements

    assert isinstance(budget, ui.number)
    assert budget.error is not None
    assert f"estimate of {estimate} GiB" in budget.error
    assert "memoryBudgetGiB" not in budget.error  # the field is where it is shown, not repeated
    assert (await master.services.models.get("tiny-cpp")).memory_budget_gib == 0.25
