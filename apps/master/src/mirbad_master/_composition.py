"""The composition of one master: every store and service over one data directory, started as one unit.

``async with MasterServices(...)`` clears a maintenance flag left by a crash, opens the key store (a
broken key file fails the start, never opens ``/v1``), then runs the background work in one task group:
the node monitor (every node's statuses into the cache), the health monitor (auto-start, relaunch,
crash restarts, idle unload), the benchmark jobs, the telemetry collector, the API key usage flusher
and the daily backup (when a backup directory is set). Leaving it stops
them, flushes the usage counted in memory and closes the agent clients.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from types import TracebackType
from typing import Final, Self

import anyio
from anyio.abc import TaskGroup

from mirbad_orchestration import ApiKeyStore, ModelRegistry
from mirbad_orchestration.backups import (
    BackupContents,
    BackupDownloadTokens,
    BackupScheduler,
    DestinationCheck,
    RestoreJobs,
)
from mirbad_orchestration.benchmarks import BenchmarkResults
from mirbad_orchestration.commandline import RestartPendingCheck
from mirbad_orchestration.fleet import (
    ENROLLMENT_TOKENS_FILE,
    AgentClient,
    AgentClients,
    AgentEndpointResolver,
    EnrollmentTokens,
    MasterIdentityStore,
    NodeMonitor,
    NodeRegistry,
    RemoteTelemetryCollector,
    StatusCache,
)
from mirbad_orchestration.jobs import DEFAULT_DRAIN_TIMEOUT_S, DEFAULT_GPU_SAMPLE_S, BenchmarkJobs, NodeJobs
from mirbad_orchestration.services import HostServiceManager, HostServicesStore
from mirbad_orchestration.stores import AuditLog
from mirbad_orchestration.supervision import HealthMonitor, RecoveryState, RestartPauses, StartLanes
from mirbad_orchestration.tuning import (
    FleetNodeFacts,
    FleetTuningRunners,
    RunnerFactory,
    TuningJobs,
    TuningResults,
)
from mirbad_protocol import MirbadError, ModelDefinition, ModelState, ModelStatus
from mirbad_protocol.benchmarks import BenchmarkSizes, PresetSizes
from mirbad_protocol.pki import CertificateAuthority

from ._backup_source import MasterBackupSource
from ._job_host import MasterJobHost
from ._llama_server_build import LlamaServerBuild, refuse_llamacpp_start
from ._local_pki import master_names_refused
from ._maintenance import MaintenanceMode
from ._master_runtime import MasterRuntime
from ._restore_host import MasterRestoreHost
from ._router_adapters import ApiKeyGate, FleetResolver, MasterStats
from ._settings import MasterSettings
from .exceptions import StartPausedError

__all__ = ["ON_REQUEST_ACTOR", "SHUTDOWN_ACTOR", "MasterServices"]

ON_REQUEST_ACTOR: Final = "system:on-request"
"""The audit actor of a start a ``/v1`` request caused (a model that starts on request)."""
SHUTDOWN_ACTOR: Final = "system:shutdown"
"""The audit actor of the stops of a fleet of one that is shutting down."""

ShareSecret = Callable[[], Awaitable[str | None]]
"""The backup share's password in clear text, for a passphrase backup's secrets; None when none is kept."""

_logger = logging.getLogger("mirbad_master")
_STOP_MODELS_TIMEOUT_S: Final = 180.0
_LIST_MODELS_TIMEOUT_S: Final = 30.0


class MasterServices:
    """Every store and background service of one master (see the module).

    Args:
        settings: the master's settings (data directory, intervals, crash restart, idle unload).
        clients: the agent clients (mutual TLS in production, in-process transports in tests).
        authority: the fleet CA, which certifies enrolling nodes.
        local_boot_id: a boot id for the local node when its agent reports none (a fleet of one,
            whose models stop with it: see :class:`MasterRuntime`).
        stop_models_on_exit: a node whose models are stopped when the services stop (after the
            monitors, so the stops are not taken for crashes); they stay in the recovery state.
        benchmark_sizes: the sizes of the benchmark suite (the spec's by default; tests pass small ones).
        preset_sizes: the sizes of the workload presets (likewise).
        drain_timeout_s: how long a benchmark job waits for its node to drain.
        gpu_sample_s: how long a benchmark job samples its node's GPUs (the spec's 5 s).
        tuning_runners: builds a tuning run's candidate runner (tuning instances through the agents by
            default; tests pass a simulator).
        tuning_repetitions: the repetitions of the search and of the confirmation stage (3 and 5).

    Attributes:
        host_services_store: ``host-services.json`` (the Services page and a restore share it).
        restore: the restore job (one at a time, fleet-wide).
        registry_lock: held by the models' actions (``models.actions``) around a model's id check and write.
        stopped_on_exit: the models stopped on the way out, as they were before (their pids).
        left_on_exit: the models that ran on the way out and could not be stopped.
        unlisted_on_exit: why the models could not even be listed on the way out, else None.
        elsewhere_on_exit: the models that run on other nodes, which the way out leaves alone (as the
            last poll saw them, ``node_id`` set), with whether their node answered that poll.
        llama_server_build: the local llama-server's background build of a first ``mirbad up``, if one.
    """

    def __init__(
        self,
        settings: MasterSettings,
        *,
        clients: AgentClients,
        authority: CertificateAuthority,
        local_boot_id: str | None = None,
        stop_models_on_exit: str | None = None,
        benchmark_sizes: BenchmarkSizes | None = None,
        preset_sizes: PresetSizes | None = None,
        drain_timeout_s: float = DEFAULT_DRAIN_TIMEOUT_S,
        gpu_sample_s: float = DEFAULT_GPU_SAMPLE_S,
        tuning_runners: RunnerFactory | None = None,
        tuning_repetitions: tuple[int, int] = (3, 5),
    ) -> None:
        data_dir = settings.data_dir
        self.settings = settings
        self.authority = authority
        self.clients = clients
        self.models = ModelRegistry(data_dir)
        # Held by the models' actions (models.actions) around a model's id check and its write, so a create
        # from the API and one from the portal at the same time cannot both succeed.
        self.registry_lock = anyio.Lock()
        self.nodes = NodeRegistry(data_dir)
        self.keys = ApiKeyStore(data_dir, flush_interval=settings.usage_flush_s)
        self.audit = AuditLog(data_dir, max_file_bytes=settings.audit_max_file_bytes)
        # Who this master is to its fleet: backups carry it, fleet recovery puts it back one epoch up.
        self.identity = MasterIdentityStore(data_dir)
        # Every agent request names this master (instance id, epoch): agents refuse an older master's.
        clients.fence_with(self.identity.read)
        self.recovery = RecoveryState(data_dir)
        self.pauses = RestartPauses(data_dir)
        # With the registry: a name is enrolled once, and an enrolled node is registered and pinned.
        self.enrollment = EnrollmentTokens(
            data_dir / ENROLLMENT_TOKENS_FILE,
            authority,
            nodes=self.nodes,
            san_policy=master_names_refused(settings.host),
        )
        self.maintenance = MaintenanceMode(data_dir)
        self.lanes = StartLanes()
        self.cache = StatusCache()
        self.node_monitor = NodeMonitor(
            self.nodes, clients, cache=self.cache, interval_s=settings.health_poll_s
        )
        self.runtime = MasterRuntime(
            self.node_monitor,
            local_boot_id=local_boot_id,
            default_node_id=settings.default_node,
            start_gate=self._refuse_before_llama_server,
        )
        self.endpoints = AgentEndpointResolver(
            self.models, self.nodes, clients, self.cache, default_node_id=settings.default_node
        )
        self.telemetry = RemoteTelemetryCollector(
            self.nodes, clients, cache=self.cache, interval_s=settings.telemetry_interval_s
        )
        self.stats = MasterStats()
        # Set by `mirbad up` while it builds the local llama-server: llama.cpp starts wait for it.
        self.llama_server_build: LlamaServerBuild | None = None
        self.restart_pending = RestartPendingCheck()
        # Read live by the health monitor on every poll; refreshed by sync_models().
        self.idle_ttls: dict[str, float] = {}
        self.health = HealthMonitor(
            self.runtime,
            self.models.list,
            recovery=self.recovery,
            pauses=self.pauses,
            lanes=self.lanes,
            audit=self.audit,
            settings=settings.health_settings(self.idle_ttls),
            skip=self.maintenance.owns,
            last_used=self.stats.last_used,
        )
        # Every start, stop and restart by hand (API, portal, start on request) goes through here.
        self.control = self.health.control
        self.resolver = FleetResolver(self.endpoints, self.cache, self._start_on_request)
        self.key_gate = ApiKeyGate(self.keys)
        self.benchmarks = BenchmarkResults(data_dir)
        self.host_services_store = HostServicesStore(data_dir)
        self.host_services = HostServiceManager(self.host_services_store, self.client_of)
        # The daily backup and "back up now" (backups.actions); a failure is recorded for the portal.
        self.backup_source = MasterBackupSource(
            models=self.models,
            nodes=self.nodes,
            host_services=self.host_services_store,
            identity=self.identity,
            keys=self.keys,
            authority=authority,
        )
        # Filled by the backup destination's room when the app is assembled (the composition imports
        # no room): the share password a passphrase backup carries, and the scheduler's check that a
        # configured share is really mounted under the backup directory.
        self.share_password: ShareSecret | None = None
        self.backup_destination_check: DestinationCheck | None = None
        self.backups = BackupScheduler(
            self._backup_contents,
            settings.backup_settings(),
            host=socket.gethostname(),
            destination_check=self._check_backup_destination,
        )
        self.backup_downloads = BackupDownloadTokens()
        # One restore at a time, fleet-wide; it leaves every node serving (no maintenance hold).
        self.restore = RestoreJobs(MasterRestoreHost(self))
        job_host = MasterJobHost(
            models=self.models,
            nodes=self.nodes,
            clients=clients,
            cache=self.cache,
            endpoints=self.endpoints,
            telemetry=self.telemetry,
            runtime=self.runtime,
            restart_pending=self.restart_pending,
        )
        # One job at a time per node, whatever its kind; a job holds its node through the maintenance state.
        self.job_runner = NodeJobs(job_host, self.maintenance.state)
        self.jobs = BenchmarkJobs(
            job_host,
            self.benchmarks,
            self.maintenance.state,
            sizes=benchmark_sizes,
            preset_sizes=preset_sizes,
            drain_timeout_s=drain_timeout_s,
            gpu_sample_s=gpu_sample_s,
            poll_s=min(1.0, settings.health_poll_s),
            runner=self.job_runner,
        )
        self.tuning_results = TuningResults(data_dir)
        self.tuning = TuningJobs(
            job_host,
            self.models.get,
            self.tuning_results,
            self.maintenance.state,
            tuning_runners
            or FleetTuningRunners(
                self.nodes,
                clients,
                self.runtime,
                sizes=benchmark_sizes,
                preset_sizes=preset_sizes,
                definition=self.models.get,
            ),
            runner=self.job_runner,
            benchmarks=self.benchmarks,
            repetitions=tuning_repetitions[0],
            confirm_repetitions=tuning_repetitions[1],
            node_cores=self._node_cores,
            node_facts=FleetNodeFacts(self.nodes, clients),
        )
        self.stopped_on_exit: list[ModelStatus] = []
        self.left_on_exit: list[ModelStatus] = []
        self.unlisted_on_exit: str | None = None
        self.elsewhere_on_exit: list[tuple[ModelStatus, bool]] = []
        self._stop_models_of = stop_models_on_exit
        self._stack: AsyncExitStack | None = None

    async def _backup_contents(self, *, secrets: bool) -> BackupContents:
        password = await self.share_password() if secrets and self.share_password is not None else None
        return await self.backup_source(secrets=secrets, share_password=password)

    async def _check_backup_destination(self, directory: Path) -> str | None:
        if self.backup_destination_check is None:
            return None
        return await self.backup_destination_check(directory)

    async def __aenter__(self) -> Self:
        self.settings.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        if self.maintenance.clear_on_boot():
            _logger.warning("cleared the maintenance flag a previous run left behind")
        async with AsyncExitStack() as stack:
            await stack.enter_async_context(self.keys)
            stack.push_async_callback(self.clients.aclose)
            if self._stop_models_of is not None:
                stack.push_async_callback(self._stop_models, self._stop_models_of)
            await self.sync_models()
            tasks = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(tasks.cancel_scope.cancel)  # runs first on the way out
            await self._start_background(tasks)
            self._stack = stack.pop_all()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()

    async def sync_models(self) -> None:
        """Refresh what is derived from the registry: served names, idle times, kept telemetry.

        Called at start-up and after every change to the registry.
        """
        models = await self.models.list()
        self.stats.name_models({model.id: model.served_name for model in models})
        default = self.settings.idle_unload_s
        self.idle_ttls.clear()
        for model in models:
            # A model's own ttl wins; the default applies only to models a request brings back.
            ttl = model.idle_unload_s or (default if model.auto_start_on_request else None)
            if ttl is not None:
                self.idle_ttls[model.id] = ttl
        self.telemetry.retain(model.id for model in models)

    async def _stop_models(self, node_id: str) -> None:
        """Stop every model running on ``node_id``, leaving them listed in the recovery state.

        This is how a fleet of one shuts down: its models stop with it, and since they stay listed,
        the next start brings the same set back. Runs after the monitors stopped, shielded and bounded,
        so it finishes even when the master is being cancelled; the models stop side by side (the
        wait is the slowest stop, not their sum); one that cannot be stopped is logged and reported in
        :attr:`left_on_exit`. Nothing skips it: a hurried shutdown still stops the models.
        """
        # The other nodes' models keep running: only this node's stop with it. Said, not stopped.
        self.elsewhere_on_exit = [
            (status, state.reachable)
            for state in self.cache.nodes()
            if state.node_id != node_id
            for status in state.models
            if status.state is not ModelState.STOPPED
        ]
        with anyio.CancelScope(shield=True):
            try:
                with anyio.fail_after(_LIST_MODELS_TIMEOUT_S):
                    # Asked afresh, not from the cache: a launch cancelled on the way out may have landed.
                    client = await self.client_of(node_id)
                    statuses = await client.statuses()
            except (MirbadError, TimeoutError) as exc:
                self.unlisted_on_exit = str(exc) or type(exc).__name__
                _logger.warning("cannot list the models of node %s to stop them: %s", node_id, exc)
                return
            running = [status for status in statuses if status.state is not ModelState.STOPPED]
            with anyio.move_on_after(_STOP_MODELS_TIMEOUT_S):
                async with anyio.create_task_group() as stops:
                    for status in running:
                        stops.start_soon(self._stop_on_exit, node_id, status)
            stopped = {status.id for status in self.stopped_on_exit}
            self.left_on_exit = [status for status in running if status.id not in stopped]

    async def _stop_on_exit(self, node_id: str, status: ModelStatus) -> None:
        try:
            await self.runtime.stop(status.id)
        except MirbadError as exc:
            _logger.warning("could not stop model %s: %s", status.id, exc)
            return
        self.stopped_on_exit.append(status)
        await self.audit.record(SHUTDOWN_ACTOR, "model.stop", status.id, node_id=node_id)

    async def _start_background(self, tasks: TaskGroup) -> None:
        # The first node poll fills the cache before the health monitor looks at it.
        await tasks.start(self.node_monitor.run)
        await tasks.start(self.health.run)
        await tasks.start(self.job_runner.run)
        await tasks.start(self.restore.run)
        tasks.start_soon(self._recover_tuning)
        tasks.start_soon(self.telemetry.run)
        tasks.start_soon(self.keys.run_usage_flusher)
        tasks.start_soon(self.backups.run_forever)

    async def _recover_tuning(self) -> None:
        # A master that stopped mid-run left a tuning instance and a stopped model behind.
        try:
            with anyio.fail_after(_LIST_MODELS_TIMEOUT_S * 4):
                # From the first poll's cache: no extra request to any agent.
                seen = [status for node in self.cache.nodes() for status in node.models]
                for done in await self.tuning.recover(self.runtime, await self.models.list(), seen):
                    _logger.warning("tuning recovery: %s", done)
        except (MirbadError, TimeoutError) as exc:
            _logger.warning("cannot look for leftover tuning instances: %s", exc)

    def _node_cores(self, node_id: str) -> int | None:
        state = self.cache.node(node_id)
        return state.info.cpu_count if state is not None and state.info is not None else None

    async def client_of(self, node_id: str) -> AgentClient:
        """Node ``node_id``'s agent client as registered now (a changed address or identity gets a new one).

        Raises:
            UnknownNodeError: no such node.
        """
        return self.clients.client_for(await self.nodes.get(node_id))

    def _refuse_before_llama_server(self, definition: ModelDefinition, node_id: str) -> None:
        refuse_llamacpp_start(self.llama_server_build, definition, node_id)

    async def _start_on_request(self, model_id: str) -> None:
        definition = await self.models.get(model_id)
        pause = await self.pauses.get(model_id)
        if pause is not None:
            raise StartPausedError(
                f"model {model_id!r} crashed {pause.crashes} times in a row and its automatic restarts "
                "are paused; start it by hand once it is fixed"
            )
        await self.control.start(definition, actor=ON_REQUEST_ACTOR)
