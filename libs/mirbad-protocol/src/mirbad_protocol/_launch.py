"""The launch spec: what the master asks an agent to run. Agents execute it without reading its flags."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator

from ._definition import MODEL_ID_PATTERN, ExecutableRef, RuntimeKind
from ._wire import WireModel

__all__ = ["ContainerLaunch", "GpuSelection", "LaunchSpec", "ProcessLaunch"]

_CONFIG_HASH = r"^[0-9a-f]{16}$"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class GpuSelection(WireModel):
    """Which GPUs a model may use: all of them, none, or the listed UUIDs."""

    mode: Literal["all", "none", "uuids"] = "all"
    uuids: list[str] = Field(default_factory=list)

    @field_validator("uuids")
    @classmethod
    def _no_blank(cls, value: list[str]) -> list[str]:
        if any(not uuid.strip() for uuid in value):
            raise ValueError("a GPU UUID cannot be blank")
        return value


class _LaunchBase(WireModel):
    model_id: Annotated[str, Field(pattern=MODEL_ID_PATTERN)]
    served_name: Annotated[str, Field(min_length=1)]
    runtime: RuntimeKind
    argv: list[str]
    model_path: Annotated[str, Field(min_length=1)]
    env: dict[str, str] = Field(default_factory=dict)
    budget_gib: Annotated[float, Field(gt=0, allow_inf_nan=False, alias="budgetGiB")]
    gpus: GpuSelection = Field(default_factory=GpuSelection)
    labels: dict[str, str] = Field(default_factory=dict)
    config_hash: Annotated[str, Field(pattern=_CONFIG_HASH)]

    @field_validator("env")
    @classmethod
    def _check_env(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not an environment variable name")
        return value


class ContainerLaunch(_LaunchBase):
    """Run ``image`` as a container whose command is ``argv`` (vLLM: the arguments of ``vllm serve``)."""

    kind: Literal["container"] = "container"
    image: Annotated[str, Field(min_length=1)]


class ProcessLaunch(_LaunchBase):
    """Run the node's catalogued ``executable`` with ``argv`` as a native process.

    The agent adds only the plumbing it owns (listen address, port, per-instance API key) and resolves
    ``model_path`` under its model roots.
    """

    kind: Literal["process"] = "process"
    executable: ExecutableRef


LaunchSpec = Annotated[ContainerLaunch | ProcessLaunch, Field(discriminator="kind")]
"""A launch spec on the wire, told apart by ``kind``."""
