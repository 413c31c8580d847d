"""The process driver: llama-server and MLX models as native processes the agent outlives.

Each launch is written to ``processes.json``; every status is derived on read from that record, the
process table (is the very process still there: pid, start time and the process group the driver
created, which survive a wrapper script's ``exec``) and a ``GET /health``:

* no record: Stopped (Starting while a launch is in flight);
* the process is gone: Failed, with the last lines of its log file, until a stop or a new start;
  whatever still runs of it (its process group) is stopped before a new start, so a model never
  runs twice;
* it runs and /health answers 200: Ready; it runs and /health does not (llama-server answers 503
  while loading): Starting; a stop in flight: Stopping.

The port is chosen free, but another program (another agent on the machine, say) can take it before
the model binds it. A model this agent launched that dies of that before it was ever Ready is
launched again on the next free port, at most ``PORT_RETRIES`` times; its status reads Starting.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator
from pathlib import Path

import anyio
import anyio.to_thread
import httpx

from mirbad_protocol import ContainerLaunch, ModelState, ModelStatus, ProcessLaunch, RuntimeKind
from mirbad_protocol.support import single_errors

from ._driver import RuntimeDriver
from ._executables import ExecutableCatalog
from ._gpu_attribution import GpuOwner
from ._instance_keys import InstanceKeyProtector, new_instance_key
from ._memory_usage import process_rss_bytes
from ._ports import loopback_port_free, lowest_free_port
from ._process_host import ProcessHost, ProcessIdentity
from ._process_launch import (
    ProcessDriverConfig,
    check_owned_flags,
    child_environment,
    process_argv,
    resolve_model_path,
)
from ._process_logs import follow_log, read_log_tail, rotate_log
from ._process_observer import ProcessObserver
from ._process_records import ProcessRecord, ProcessRecordStore
from .exceptions import LaunchRejectedError, ModelNotFoundError, RuntimeUnavailableError

__all__ = ["ProcessDriver"]

logger = logging.getLogger(__name__)

PORT_RETRIES = 2
"""How many times a launch whose port was taken before the model bound it is tried again."""

# What the runtimes print when their listener's port is taken: llama-server's own words, and the
# operating system's (Python's http.server and uvicorn, used by MLX and others).
_PORT_TAKEN_MARKERS = ("couldn't bind http server socket", "address already in use")


def lost_its_port(error: str | None) -> bool:
    """Whether a Failed model's log tail says its listening port was taken."""
    text = (error or "").lower()
    return any(marker in text for marker in _PORT_TAKEN_MARKERS)


class ProcessDriver(RuntimeDriver):
    """Runs each model as a detached native process and finds it again after an agent restart.

    Args:
        config: model roots, ports, timeouts and the state folder.
        host: the operating system's process host.
        catalog: resolves a spec's logical executable to a verified binary.
        keys: keeps each instance's API key at rest.
        http: the client for health checks (the driver does not close one passed in).
    """

    def __init__(
        self,
        config: ProcessDriverConfig,
        *,
        host: ProcessHost,
        catalog: ExecutableCatalog,
        keys: InstanceKeyProtector,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self._config = config
        self._host = host
        self._catalog = catalog
        self._records = ProcessRecordStore(config.records_path)
        self._owns_http = http is None
        # Health checks go straight to loopback, never through a proxy from the environment.
        self._http = http or httpx.AsyncClient(timeout=config.health_timeout_s, trust_env=False)
        self._observer = ProcessObserver(
            host, keys, self._http, host_address=config.host, health_timeout_s=config.health_timeout_s
        )
        self._launch_lock = anyio.Lock()
        self._model_locks: dict[str, anyio.Lock] = {}
        self._starting: dict[str, ProcessLaunch] = {}
        self._stopping: set[str] = set()
        # Launches of this agent not yet seen Ready, with the retries left for a port lost to a race.
        self._unproven: dict[str, tuple[ProcessLaunch, int]] = {}
        # Only for naming a model that has no record right now; never read as its state.
        self._names: dict[str, tuple[str, RuntimeKind]] = {}

    @property
    def config(self) -> ProcessDriverConfig:
        """The settings this driver runs with."""
        return self._config

    @property
    def records(self) -> ProcessRecordStore:
        """The store behind ``processes.json``."""
        return self._records

    async def adopt(self) -> list[ModelStatus]:
        """Take over the processes a previous agent recorded; report the ones that died as Failed.

        A record whose process is gone (or whose pid now belongs to another process) stays, reported
        Failed with its log tail like any crash, until the model is stopped or started again.
        """
        statuses = await self.list_statuses()
        for status in statuses:
            logger.info("adopted model %s: %s on port %s", status.id, status.state, status.port)
        return statuses

    async def start(self, spec: ContainerLaunch | ProcessLaunch) -> ModelStatus:
        """Spawn the spec's executable detached, record it, and return its first status."""
        if not isinstance(spec, ProcessLaunch):
            raise LaunchRejectedError("the process driver runs process launch specs only")
        model_id = spec.model_id
        if model_id in self._stopping:
            raise LaunchRejectedError(f"model {model_id} is stopping; start it again once it has stopped")
        self._names[model_id] = (spec.served_name, spec.runtime)
        self._starting[model_id] = spec
        try:
            async with self._lock_of(model_id), self._launch_lock:
                existing = await self._records.get(model_id)
                if existing is not None and await self._observer.alive(existing.identity):
                    record = existing
                else:
                    if existing is not None:
                        await self._end_leftovers(existing)
                    await self._forget(model_id)
                    record = await self._launch(spec)
                    self._unproven[model_id] = (spec, PORT_RETRIES)
        finally:
            self._starting.pop(model_id, None)
        return await self._status_of(record)

    async def stop(self, model_id: str) -> None:
        """SIGTERM the model's group, SIGKILL it after ``stop_timeout_s``, then drop its record and key.

        Raises:
            RuntimeUnavailableError: the process survived SIGKILL for ``kill_timeout_s``.
            StateWriteError: the process is stopped, but ``processes.json`` could not take it (a full
                disk); the record is gone from memory and written as soon as there is room.
        """
        async with self._lock_of(model_id):
            self._stopping.add(model_id)
            try:
                record = await self._records.get(model_id)
                if record is not None:
                    await self._end(record)
                self._unproven.pop(model_id, None)
                await self._forget(model_id)
            finally:
                self._stopping.discard(model_id)

    async def status(self, model_id: str) -> ModelStatus:
        """The model's state from its record, the process table and its ``/health``."""
        record = await self._records.get(model_id)
        return self._absent_status(model_id) if record is None else await self._status_of(record)

    async def list_statuses(self) -> list[ModelStatus]:
        """Every recorded model, plus those whose launch is in flight, in model-id order."""
        statuses: dict[str, ModelStatus] = {}

        async def read(record: ProcessRecord) -> None:
            statuses[record.model_id] = await self._status_of(record)

        records = await self._records.all()
        with single_errors():
            async with anyio.create_task_group() as group:
                for record in records:
                    group.start_soon(read, record)
        for model_id in self._starting.keys() - statuses.keys():
            statuses[model_id] = self._absent_status(model_id)
        return [statuses[model_id] for model_id in sorted(statuses)]

    async def logs(self, model_id: str, tail: int = 200) -> list[str]:
        """The last ``tail`` lines of the model's log file (stdout and stderr)."""
        record = await self._require(model_id)
        return await anyio.to_thread.run_sync(read_log_tail, record.log_file, tail)

    async def follow_logs(self, model_id: str, tail: int = 0) -> AsyncGenerator[str, None]:
        """Stream the model's log file until its process ends or the caller stops iterating."""
        record = await self._require(model_id)

        async def running() -> bool:
            return await self._observer.alive(record.identity)

        lines = follow_log(record.log_file, tail, running, poll_s=self._config.poll_interval_s)
        async with contextlib.aclosing(lines):
            async for line in lines:
                yield line

    async def upstream_url(self, model_id: str) -> str:
        """``http://127.0.0.1:{port}/``: the model's own loopback listener."""
        record = await self._require(model_id)
        return f"http://{self._config.host}:{record.port}/"

    async def upstream_headers(self, model_id: str) -> dict[str, str]:
        """The headers the agent's proxy sends upstream: the instance key as a bearer token, if any.

        Raises:
            ModelNotFoundError: no record of the model.
            InstanceKeyError: its stored key cannot be read back or trusted.
        """
        return await self._observer.bearer((await self._require(model_id)).model_id)

    async def memory_bytes(self, model_id: str) -> int | None:
        """The resident set of the model's process (telemetry), None when it is not running or unreadable."""
        record = await self._records.get(model_id)
        # The identity check first: a pid reused by another process must not be measured as the model.
        if record is None or not await self._observer.alive(record.identity):
            return None
        return await anyio.to_thread.run_sync(process_rss_bytes, record.pid)

    async def gpu_owner(self, model_id: str) -> GpuOwner | None:
        """The model's server pid (its children count too); None when it is not running."""
        record = await self._records.get(model_id)
        # As for memory: a reused pid must not have another process's GPU memory put on the model.
        if record is None or not await self._observer.alive(record.identity):
            return None
        return GpuOwner(pid=record.pid)

    async def aclose(self) -> None:
        """Close the HTTP client; the model processes keep running."""
        if self._owns_http:
            await self._http.aclose()

    async def _launch(self, spec: ProcessLaunch) -> ProcessRecord:
        check_owned_flags(spec.argv)
        root, _ = resolve_model_path(self._config.model_roots, spec.model_path)
        executable = await self._catalog.resolve(spec.executable)
        port = await self._choose_port()
        key_variable = self._config.key_variables.get(spec.runtime)
        key = new_instance_key() if key_variable else None
        inherit = self._config.inherit_environment
        env = child_environment(spec, inherit=inherit, key_variable=key_variable, key=key)
        argv = process_argv(executable, spec, self._config.host, port)
        log_path = self._config.logs_dir / f"{spec.model_id}.log"
        # Spawning and recording belong together: a model that runs unrecorded is one nobody sees.
        with anyio.CancelScope(shield=True):
            identity = await anyio.to_thread.run_sync(self._spawn, argv, root, env, log_path)
            record = ProcessRecord.of_launch(
                spec, identity, port=port, log_path=log_path, cwd=root, argv=argv
            )
            try:
                await self._observer.save_key(spec.model_id, key)
                await self._records.put(record)
            except BaseException:
                await anyio.to_thread.run_sync(self._host.kill, identity)
                raise
        logger.info("started model %s: pid %s on port %s", spec.model_id, identity.pid, port)
        return record

    def _spawn(self, argv: list[str], root: Path, env: dict[str, str], log_path: Path) -> ProcessIdentity:
        log_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        rotate_log(log_path)
        try:
            return self._host.spawn(argv, cwd=root, env=env, log_path=log_path)
        except OSError as exc:
            raise LaunchRejectedError(f"could not start {argv[0]}: {exc}") from exc

    async def _choose_port(self) -> int:
        # A Failed model keeps its port until it is stopped or started again, as a dead container does.
        taken = {record.port for record in await self._records.all()}
        start, end, address = self._config.port_range_start, self._config.port_range_end, self._config.host
        port = await anyio.to_thread.run_sync(
            lambda: lowest_free_port(
                start, end, taken, lambda candidate: loopback_port_free(candidate, address)
            )
        )
        if port is None:
            raise LaunchRejectedError(f"no free port in {start}-{end}")
        return port

    async def _end_leftovers(self, record: ProcessRecord) -> None:
        # A second instance beside what is left of the first would serve one model twice.
        if await anyio.to_thread.run_sync(self._host.lingers, record.identity):
            logger.warning(
                "model %s: its process %s ended but its process group still runs; stopping it first",
                record.model_id,
                record.pid,
            )
            await self._end(record)

    async def _end(self, record: ProcessRecord) -> None:
        identity = record.identity
        if await anyio.to_thread.run_sync(self._host.terminate, identity):
            if await self._gone_within(identity, self._config.stop_timeout_s):
                return
            logger.warning("model %s ignored SIGTERM; killing its process group", record.model_id)
        await anyio.to_thread.run_sync(self._host.kill, identity)
        if not await self._gone_within(identity, self._config.kill_timeout_s):
            raise RuntimeUnavailableError(f"model {record.model_id} (pid {record.pid}) survived SIGKILL")

    async def _gone_within(self, identity: ProcessIdentity, timeout_s: float) -> bool:
        with anyio.move_on_after(timeout_s):
            # Polling is the only way: a process this agent did not spawn signals nothing when it ends.
            while await self._observer.runs(identity):  # noqa: ASYNC110
                await anyio.sleep(self._config.poll_interval_s)
            return True
        return False

    async def _forget(self, model_id: str) -> None:
        try:
            await self._records.remove(model_id)
        finally:  # a record the full disk kept in the file still loses its key: its process is gone
            await self._observer.delete_key(model_id)

    async def _status_of(self, record: ProcessRecord) -> ModelStatus:
        model_id = record.model_id
        self._names[model_id] = (record.served_name, record.runtime)
        status = await self._observer.status_of(record, stopping=model_id in self._stopping)
        if status.state == ModelState.READY:
            self._unproven.pop(model_id, None)
        elif status.state == ModelState.FAILED and model_id in self._unproven and lost_its_port(status.error):
            relaunched = await self._relaunch_on_another_port(record)
            if relaunched is not None:
                status = await self._observer.status_of(relaunched)
        return status

    async def _relaunch_on_another_port(self, failed: ProcessRecord) -> ProcessRecord | None:
        model_id = failed.model_id
        async with self._lock_of(model_id), self._launch_lock:
            current = await self._records.get(model_id)
            unproven = self._unproven.get(model_id)
            # Another reader may have relaunched it already, or a stop or start may have come between.
            if current is None or current.identity != failed.identity or unproven is None:
                return current
            spec, retries = unproven
            if retries <= 0 or model_id in self._stopping:
                self._unproven.pop(model_id, None)
                return None
            logger.warning(
                "model %s: port %s was taken before it bound it; launching it on another port",
                model_id,
                failed.port,
            )
            await self._end_leftovers(failed)
            try:
                # The new record and key replace the failed one's; it stays when no launch is made.
                relaunched = await self._launch(spec)
            except LaunchRejectedError as exc:
                logger.warning("model %s: not launched again: %s", model_id, exc)
                self._unproven.pop(model_id, None)
                return None
            self._unproven[model_id] = (spec, retries - 1)
            return relaunched

    async def _require(self, model_id: str) -> ProcessRecord:
        record = await self._records.get(model_id)
        if record is None:
            raise ModelNotFoundError(model_id)
        return record

    def _absent_status(self, model_id: str) -> ModelStatus:
        spec = self._starting.get(model_id)
        served_name, runtime = self._names.get(model_id, ("", "llamacpp"))
        if spec is None:
            return ModelStatus(
                id=model_id, served_name=served_name, state=ModelState.STOPPED, runtime=runtime
            )
        return ModelStatus(
            id=model_id,
            served_name=spec.served_name,
            state=ModelState.STARTING,
            runtime=spec.runtime,
            config_hash=spec.config_hash,
            budget_gib=spec.budget_gib,
        )

    def _lock_of(self, model_id: str) -> anyio.Lock:
        return self._model_locks.setdefault(model_id, anyio.Lock())
