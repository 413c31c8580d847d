"""The process driver's settings, and how it turns a launch spec into a command line and environment.

The spec's argv holds only the model's own flags. The driver adds what it owns: the listen address
and port (``--host``/``--port``, appended) and the per-instance API key (an environment variable, never
an argument, since any local user can read a command line). The process starts in the model root that
holds its model, so the spec's relative ``--model`` path resolves there.

The spec's GPU selection reaches the process as ``CUDA_VISIBLE_DEVICES`` (the GPUs' UUIDs, or nothing
for none), not as a server flag: CUDA takes the UUIDs the placement names as they are, while
llama-server's ``--device CUDA<n>`` counts the GPUs in CUDA's own order, which need not be
nvidia-smi's; and the variable means the same to every CUDA program the driver may start. A selection
of all GPUs leaves the variable as the agent's environment has it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Final

from mirbad_protocol import GpuSelection, ProcessLaunch, RuntimeKind

from .exceptions import LaunchRejectedError, ModelPathRejectedError

__all__ = ["ProcessDriverConfig"]

_OWNED_FLAGS: Final = ("--host", "--port", "--api-key", "--api-key-file")
GPU_VARIABLE: Final = "CUDA_VISIBLE_DEVICES"
"""The variable that hands a process its GPUs when its spec selects some (or none) of them."""
_DRIVE: Final = re.compile(r"^[A-Za-z]:")


def _default_key_variables() -> dict[RuntimeKind, str]:
    # mlx_lm.server has no API key; llama-server reads its key from this variable.
    return {"llamacpp": "LLAMA_API_KEY"}


@dataclass(frozen=True, kw_only=True)
class ProcessDriverConfig:
    """How the process driver runs native models on this node.

    Attributes:
        state_dir: the agent's state folder; ``processes.json`` and ``logs/`` live in it.
        model_roots: the folders model paths are resolved under; a model runs in the root holding it.
        port_range_start: the lowest loopback port a model may listen on.
        port_range_end: the highest one (inclusive).
        host: the address models listen on and the proxy reaches them at (loopback).
        stop_timeout_s: how long a stop waits after SIGTERM before it kills the process group.
        kill_timeout_s: how long it then waits for the killed process to disappear.
        health_timeout_s: bound on one ``GET /health``.
        poll_interval_s: how often a stop or a log follower looks at the process again.
        key_variables: per runtime, the environment variable that hands the instance key to the server;
            a runtime missing here gets no key.
        inherit_environment: start models with the agent's environment (plus the spec's ``env``)
            rather than with the spec's ``env`` alone.
    """

    state_dir: Path
    model_roots: tuple[Path, ...]
    port_range_start: int = 8100
    port_range_end: int = 8999
    host: str = "127.0.0.1"
    stop_timeout_s: float = 10.0
    kill_timeout_s: float = 5.0
    health_timeout_s: float = 2.0
    poll_interval_s: float = 0.1
    key_variables: Mapping[RuntimeKind, str] = field(default_factory=_default_key_variables)
    inherit_environment: bool = True

    def __post_init__(self) -> None:
        if not 1 <= self.port_range_start <= self.port_range_end <= 65535:
            raise ValueError(
                f"port range {self.port_range_start}-{self.port_range_end} is not an ascending range of ports"
            )
        if not self.model_roots:
            raise ValueError("the process driver needs at least one model root")
        if min(self.stop_timeout_s, self.kill_timeout_s, self.health_timeout_s, self.poll_interval_s) <= 0:
            raise ValueError("timeouts and the poll interval must be positive")

    @property
    def records_path(self) -> Path:
        """``processes.json`` in the state folder."""
        return self.state_dir / "processes.json"

    @property
    def logs_dir(self) -> Path:
        """The folder of the models' log files."""
        return self.state_dir / "logs"


def resolve_model_path(roots: Sequence[Path], model_path: str) -> tuple[Path, Path]:
    """The model root holding ``model_path`` and the file (or folder) it resolves to, both real paths.

    Raises:
        ModelPathRejectedError: an absolute path, a ``..`` segment, a symlink that leads out of its
            root, or nothing there under any root.
    """
    relative = PurePosixPath(model_path.replace("\\", "/"))
    if relative.is_absolute() or _DRIVE.match(model_path):
        raise ModelPathRejectedError(model_path, "it must be relative to a model root")
    if ".." in relative.parts:
        raise ModelPathRejectedError(model_path, "'..' segments are not allowed")
    for root in roots:
        real_root = root.resolve()
        try:
            target = real_root.joinpath(*relative.parts).resolve(strict=True)
        except OSError:
            continue
        if not target.is_relative_to(real_root):
            raise ModelPathRejectedError(model_path, f"it leads out of the model root {root}")
        return real_root, target
    raise ModelPathRejectedError(model_path, "no such file under the node's model roots")


def check_owned_flags(argv: Sequence[str]) -> None:
    """Refuse a spec whose argv sets a flag the driver owns (listen address, port, API key)."""
    for argument in argv:
        name = argument.split("=", 1)[0].replace("_", "-")
        if name in _OWNED_FLAGS:
            raise LaunchRejectedError(f"{argument!r}: the agent sets {name} itself")


def process_argv(executable: Path, spec: ProcessLaunch, host: str, port: int) -> list[str]:
    """The full argv: the verified executable, the spec's flags, then the driver's plumbing."""
    return [str(executable), *spec.argv, "--host", host, "--port", str(port)]


def child_environment(
    spec: ProcessLaunch, *, inherit: bool, key_variable: str | None, key: str | None
) -> dict[str, str]:
    """The model's environment: the agent's (when inherited), the spec's ``env``, its GPUs, then the key."""
    if key_variable is not None and key_variable in spec.env:
        raise LaunchRejectedError(f"env {key_variable}: the agent sets the instance key itself")
    if spec.gpus.mode != "all" and GPU_VARIABLE in spec.env:
        raise LaunchRejectedError(f"env {GPU_VARIABLE}: the agent sets it from the spec's GPU selection")
    env = dict(os.environ) if inherit else {}
    if key_variable is not None:
        # A key in the agent's own environment must never reach a model that should not have it.
        env.pop(key_variable, None)
    env.update(spec.env)
    env.update(gpu_environment(spec.gpus))
    if key_variable is not None and key is not None:
        env[key_variable] = key
    return env


def gpu_environment(selection: GpuSelection) -> dict[str, str]:
    """The variables that confine a process to ``selection`` (none for all GPUs)."""
    if selection.mode == "all":
        return {}
    return {GPU_VARIABLE: ",".join(selection.uuids) if selection.mode == "uuids" else ""}
