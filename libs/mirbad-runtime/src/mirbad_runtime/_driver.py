"""The contract every runtime driver (containers, native processes) implements for the node agent."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Self

from mirbad_protocol import ContainerLaunch, ModelStatus, ProcessLaunch

from ._gpu_attribution import GpuOwner

__all__ = ["FAILURE_LOG_LINES", "RuntimeDriver"]

FAILURE_LOG_LINES = 20
"""How many of a dead model's last log lines its Failed status carries (containers and processes alike)."""


class RuntimeDriver(ABC):
    """Starts, stops and observes models with one runtime on one node.

    A driver derives every state from the runtime itself (Docker, the process table) on each read, so
    an agent that restarts finds its models again with :meth:`adopt`. It never interprets the flags in a
    launch spec: the master built them, the driver only adds the plumbing it owns (name, port, mounts).

    Methods raise :class:`~mirbad_runtime.exceptions.MirbadRuntimeError` subclasses: a spec this driver
    cannot run is a ``LaunchRejectedError``, an unreachable runtime a ``RuntimeUnavailableError``, and
    asking for the logs or upstream of a model that is not there a ``ModelNotFoundError``.
    """

    async def adopt(self) -> list[ModelStatus]:
        """Find the models a previous agent process left running and report them; called once at start-up.

        The default reports :meth:`list_statuses`, which suits drivers that keep no state of their own.
        """
        return await self.list_statuses()

    @abstractmethod
    async def start(self, spec: ContainerLaunch | ProcessLaunch) -> ModelStatus:
        """Launch ``spec`` and return its first status (usually Starting).

        Starting a model that already runs (Starting or Ready) launches nothing and returns its status;
        a model left Failed is cleaned up and launched again.
        """

    @abstractmethod
    async def stop(self, model_id: str) -> None:
        """Stop the model and release what it held; stopping a model that is not running does nothing."""

    @abstractmethod
    async def status(self, model_id: str) -> ModelStatus:
        """The model's current state, read from the runtime now (Stopped when nothing runs)."""

    @abstractmethod
    async def list_statuses(self) -> list[ModelStatus]:
        """The status of every model this driver finds in its runtime, in model-id order."""

    @abstractmethod
    async def logs(self, model_id: str, tail: int = 200) -> list[str]:
        """The last ``tail`` lines the model wrote (stdout and stderr interleaved), oldest first."""

    @abstractmethod
    def follow_logs(self, model_id: str, tail: int = 0) -> AsyncIterator[str]:
        """Yield the last ``tail`` lines, then every new line until the model exits or the caller stops.

        The stream has no end of its own while the model runs: the caller bounds it (cancel scope,
        client disconnect) and closes it (``contextlib.aclosing``) so the runtime's log reader is released
        at once; the drivers here return async generators.
        """

    @abstractmethod
    async def upstream_url(self, model_id: str) -> str:
        """The base URL (ending in ``/``) at which the agent's proxy reaches the model's HTTP server."""

    async def upstream_headers(self, model_id: str) -> dict[str, str]:
        """Headers the proxy adds to every request it forwards to the model (a per-instance API key).

        The default adds none, which suits runtimes that serve their loopback port without a key.
        """
        return {}

    async def memory_bytes(self, model_id: str) -> int | None:
        """The memory the model's server uses now, measured by the runtime (None where it cannot tell).

        A native process reports its resident set, a container its memory usage. The default measures
        nothing; so does a model that is not running.
        """
        return None

    async def gpu_owner(self, model_id: str) -> GpuOwner | None:
        """What the model's GPU processes are found by (its container, its server's pid); None if not running.

        The default finds nothing: such a driver's models get no GPU memory in telemetry.
        """
        return None

    async def aclose(self) -> None:  # noqa: B027 - optional hook; a driver without clients keeps it
        """Release the driver's clients; running models keep running."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
