"""The master and the agent run on uvloop when it is importable, and on asyncio's loop when not."""

from __future__ import annotations

import asyncio  # noqa: TID251 (only to ask which loop class runs)
import sys

import pytest

from mirbad_router import fast_backend_options, run_event_loop


async def _loop_module(suffix: str) -> str:
    # The loop's class says which implementation runs (uvloop.Loop or asyncio's selector loop).
    return type(asyncio.get_running_loop()).__module__ + suffix


def test_uvloop_runs_when_it_is_importable() -> None:
    pytest.importorskip("uvloop")
    assert fast_backend_options() == {"use_uvloop": True}
    assert run_event_loop(_loop_module, "!").startswith("uvloop")


def test_asyncio_runs_silently_without_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # `import uvloop` now raises ImportError
    assert fast_backend_options() == {}
    assert run_event_loop(_loop_module, "!").startswith("asyncio")
