"""Reading a recorded model process's state: the process table, its /health, its log tail."""

from __future__ import annotations

import logging

import anyio.to_thread
import httpx

from mirbad_protocol import ModelState, ModelStatus

from ._driver import FAILURE_LOG_LINES
from ._instance_keys import InstanceKeyProtector
from ._process_host import ProcessHost, ProcessIdentity
from ._process_logs import read_log_tail
from ._process_records import ProcessRecord
from .exceptions import InstanceKeyError

__all__: list[str] = []

logger = logging.getLogger(__name__)


class ProcessObserver:
    """Derives a recorded model's status at the moment it is asked, and holds the instance keys.

    Args:
        host: the process host that answers whether the recorded process still runs.
        keys: where the instance keys are kept at rest (read once per model, then cached).
        http: the client for ``GET /health``.
        host_address: the loopback address models listen on.
        health_timeout_s: bound on one health check.
    """

    def __init__(
        self,
        host: ProcessHost,
        keys: InstanceKeyProtector,
        http: httpx.AsyncClient,
        *,
        host_address: str,
        health_timeout_s: float,
    ) -> None:
        self._host = host
        self._keys = keys
        self._http = http
        self._address = host_address
        self._health_timeout_s = health_timeout_s
        self._key_cache: dict[str, str | None] = {}

    async def alive(self, identity: ProcessIdentity) -> bool:
        """Whether that very process still runs (pid, start time and group; see :class:`ProcessIdentity`)."""
        return await anyio.to_thread.run_sync(self._host.is_alive, identity)

    async def runs(self, identity: ProcessIdentity) -> bool:
        """Whether anything of it still runs: the process, or what lingers of it (``ProcessHost.lingers``)."""
        return await anyio.to_thread.run_sync(self._host.runs, identity)

    async def status_of(self, record: ProcessRecord, *, stopping: bool = False) -> ModelStatus:
        """Stopping while a stop is in flight, else Failed, Starting or Ready (see the driver)."""
        status = ModelStatus(
            id=record.model_id,
            served_name=record.served_name,
            state=ModelState.STOPPING,
            runtime=record.runtime,
            port=record.port,
            pid=record.pid,
            config_hash=record.config_hash,
            budget_gib=record.budget_gib,
            started_at=record.started_at,
            argv=record.argv[1:],
            gpus=record.gpus,
        )
        if stopping:
            return status
        if not await self.alive(record.identity):
            return status.model_copy(
                update={"state": ModelState.FAILED, "error": await self._failure(record)}
            )
        ready = await self._healthy(record)
        return status.model_copy(update={"state": ModelState.READY if ready else ModelState.STARTING})

    async def bearer(self, model_id: str) -> dict[str, str]:
        """The ``Authorization`` header carrying the model's instance key; empty when it has none.

        Raises:
            InstanceKeyError: the stored key cannot be read back or trusted.
        """
        if model_id not in self._key_cache:
            self._key_cache[model_id] = await anyio.to_thread.run_sync(self._keys.load, model_id)
        key = self._key_cache[model_id]
        return {"Authorization": f"Bearer {key}"} if key else {}

    async def save_key(self, model_id: str, key: str | None) -> None:
        """Keep ``key`` as the model's instance key (at rest and in memory); None stores nothing."""
        if key is not None:
            await anyio.to_thread.run_sync(self._keys.save, model_id, key)
        self._key_cache[model_id] = key

    async def delete_key(self, model_id: str) -> None:
        """Forget the model's instance key everywhere."""
        await anyio.to_thread.run_sync(self._keys.delete, model_id)
        self._key_cache.pop(model_id, None)

    async def _failure(self, record: ProcessRecord) -> str:
        code = await anyio.to_thread.run_sync(self._host.exit_code, record.identity)
        headline = f"the process exited with code {code}" if code is not None else "the process is gone"
        if await anyio.to_thread.run_sync(self._host.lingers, record.identity):
            headline += (
                f"; what is left of it (process group {record.group or record.pid}) still runs "
                "and is stopped before the model starts again"
            )
        lines = await anyio.to_thread.run_sync(read_log_tail, record.log_file, FAILURE_LOG_LINES)
        return "\n".join([headline, *lines])

    async def _healthy(self, record: ProcessRecord) -> bool:
        try:
            headers = await self.bearer(record.model_id)
        except InstanceKeyError as exc:
            # llama-server's /health needs no key; the proxy reports the broken key when it is used.
            logger.warning("%s", exc)
            headers = {}
        url = f"http://{self._address}:{record.port}/health"
        try:
            response = await self._http.get(url, headers=headers, timeout=self._health_timeout_s)
        except httpx.HTTPError:
            return False
        return response.status_code == 200
