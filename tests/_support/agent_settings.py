"""Agent settings for the tests that compose an agent in process: no GPU probe, no runtime unless asked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mirbad_agent import AgentSettings


def agent_settings(tmp_path: Path, **values: Any) -> AgentSettings:
    """Settings over ``tmp_path`` (``state/``; ``models/`` the one model root), then ``values``.

    Both drivers are off and ``nvidia-smi`` is not asked, so a test turns on only what it checks.
    """
    (tmp_path / "models").mkdir(exist_ok=True)
    base: dict[str, Any] = {
        "state_dir": tmp_path / "state",
        "model_roots": [tmp_path / "models"],
        "nvidia_smi": None,
        "docker": {"enabled": False},
        "process": {"enabled": False},
    }
    return AgentSettings.model_validate({**base, **values})
