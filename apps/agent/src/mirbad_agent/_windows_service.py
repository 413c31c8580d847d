"""The agent as the Windows service ``mirbad-agent``: what the Service Control Manager sees.

The lifecycle is platform-free and runs the same agent as ``mirbad-agent serve``: START_PENDING while
the settings, the credentials and the drivers load, RUNNING once the agent accepts connections,
STOP_PENDING (with a wait hint covering the graceful shutdown) on a stop or shutdown control, then
STOPPED. As on SIGTERM, the agent's models keep running and the next agent adopts them. A failure ends
the service STOPPED with a service-specific exit code (:data:`SERVICE_EXIT_CONFIG` for what a user can fix,
:data:`SERVICE_EXIT_FAILED` otherwise) and an error record; records at WARNING and above go to the Event Log.
There is no console, so once the settings are read every record at INFO and above (the agent's whole
log, as ``serve`` prints it) also goes to ``{state_dir}/agent.log``, rotated at
:data:`SERVICE_LOG_MAX_BYTES` with :data:`SERVICE_LOG_BACKUPS` older files kept.

Only :func:`dispatch_to_scm` touches Windows: it imports pywin32 (``servicemanager``,
``win32serviceutil``, ``win32service``, ``win32event``) and hands the process to the SCM's dispatcher,
with :class:`ServiceControl` implemented over ``ServiceFramework``.
"""

from __future__ import annotations

import enum
import logging
import logging.handlers
import os
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.to_thread

from mirbad_protocol import MirbadError
from mirbad_protocol.pki import TlsCredentials
from mirbad_router import run_event_loop

from ._config import AgentSettings
from ._serve import load_credentials, run_agent
from .exceptions import AgentConfigError, ServiceUnsupportedError

__all__ = [
    "EVENT_LOG_SOURCE",
    "SERVICE_EXIT_CONFIG",
    "SERVICE_EXIT_FAILED",
    "SERVICE_LOG_BACKUPS",
    "SERVICE_LOG_MAX_BYTES",
    "SERVICE_LOG_NAME",
    "SERVICE_NAME",
    "START_WAIT_HINT_S",
    "STOP_POLL_S",
    "STOP_WAIT_MARGIN_S",
    "ServiceControl",
    "ServiceState",
    "ServiceStatus",
    "dispatch_to_scm",
    "run_service",
    "service_log_handler",
]

logger = logging.getLogger(__name__)

SERVICE_NAME = "mirbad-agent"
"""The service's name, as install-windows.ps1 registers it (and its virtual account NT SERVICE\\...)."""

EVENT_LOG_SOURCE = "mirbad-agent"
"""The Event Log source the installer creates in the Application log."""

SERVICE_EXIT_CONFIG = 2
"""Service-specific exit code: a configuration the agent cannot start with (as the CLI's status 2)."""

SERVICE_EXIT_FAILED = 1
"""Service-specific exit code: the agent failed otherwise."""

START_WAIT_HINT_S = 30.0
"""How long the SCM is told a start may take (composing the drivers, adopting running models)."""

STOP_WAIT_MARGIN_S = 10.0
"""Added to the graceful shutdown for the stop's wait hint: the drivers close after uvicorn."""

STOP_POLL_S = 1.0
"""The longest single wait for a stop control, so a failing agent is never held by the waiting thread."""

SERVICE_LOG_NAME = "agent.log"
"""The service's log file in the agent's state folder (``mirbad up`` names its agent's log the same)."""

SERVICE_LOG_MAX_BYTES = 10 * 1024 * 1024
"""The size at which the log file is rotated."""

SERVICE_LOG_BACKUPS = 5
"""How many rotated files (``agent.log.1`` ... ``agent.log.5``) are kept."""

_LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"  # as `mirbad-agent serve` prints


def service_log_handler(state_dir: Path) -> logging.handlers.RotatingFileHandler:
    """The handler of the service's log file: INFO and above into ``{state_dir}/agent.log``, rotated.

    Args:
        state_dir: the agent's state folder (made when missing).
    """
    state_dir.mkdir(parents=True, exist_ok=True)
    handler = logging.handlers.RotatingFileHandler(
        state_dir / SERVICE_LOG_NAME,
        maxBytes=SERVICE_LOG_MAX_BYTES,
        backupCount=SERVICE_LOG_BACKUPS,
        encoding="utf-8",
    )
    handler.setLevel(logging.INFO)
    handler.setFormatter(logging.Formatter(_LOG_FORMAT))
    return handler


class ServiceState(enum.IntEnum):
    """The states the agent reports, with the SCM's own values (winsvc.h ``SERVICE_*``)."""

    STOPPED = 1
    START_PENDING = 2
    STOP_PENDING = 3
    RUNNING = 4


@dataclass(frozen=True)
class ServiceStatus:
    """One status report to the SCM.

    Attributes:
        state: the service's state.
        wait_hint_s: how long the pending state may last before the SCM considers the service hung.
        exit_code: the service-specific exit code of a STOPPED service; 0 when it stopped cleanly.
    """

    state: ServiceState
    wait_hint_s: float = 0.0
    exit_code: int = 0


class ServiceControl(ABC):
    """The Service Control Manager's side of the service, as the lifecycle needs it.

    Both methods are called from worker threads as well as the service's own thread.
    """

    @abstractmethod
    def report(self, status: ServiceStatus) -> None:
        """Tell the SCM the service's status."""

    @abstractmethod
    def wait_for_stop(self, timeout_s: float) -> bool:
        """Block up to ``timeout_s`` for a stop or shutdown control; whether one has arrived."""


def run_service(
    control: ServiceControl, load_settings: Callable[[], AgentSettings], event_log: logging.Handler
) -> int:
    """Run the agent under ``control`` until it asks for a stop; return the service-specific exit code.

    Args:
        control: the SCM (a fake in the tests).
        load_settings: reads the agent's settings (it raises what ``mirbad-agent serve`` would print).
        event_log: the handler for the Event Log; it gets the root logger's records at WARNING and above
            while the service runs.
    """
    event_log.setLevel(logging.WARNING)
    root = logging.getLogger()
    root.addHandler(event_log)
    try:
        control.report(ServiceStatus(ServiceState.START_PENDING, wait_hint_s=START_WAIT_HINT_S))
        exit_code = _run_agent(control, load_settings)
        control.report(ServiceStatus(ServiceState.STOPPED, exit_code=exit_code))
        return exit_code
    finally:
        root.removeHandler(event_log)


def _run_agent(control: ServiceControl, load_settings: Callable[[], AgentSettings]) -> int:
    try:
        settings = load_settings()
        log_file = _log_file(settings.state_dir)
    except Exception as exc:
        return _failed(exc)
    with _logging_to(log_file):
        try:
            credentials = load_credentials(settings)
            run_event_loop(_serve_until_stopped, control, settings, credentials)
        except Exception as exc:
            return _failed(exc)  # logged while the file still takes records
    return 0


def _failed(exc: Exception) -> int:
    if isinstance(exc, MirbadError):
        logger.error("%s stops: %s", SERVICE_NAME, exc)
        return SERVICE_EXIT_CONFIG
    # Anything else is a bug or the machine's fault: the SCM's restart actions take over.
    logger.error("%s failed", SERVICE_NAME, exc_info=exc)
    return SERVICE_EXIT_FAILED


def _log_file(state_dir: Path) -> logging.Handler:
    try:
        return service_log_handler(state_dir)
    except OSError as exc:
        # A state folder the service's account cannot write is the operator's to fix.
        raise AgentConfigError(f"cannot write the service log in {state_dir}: {exc}") from exc


@contextmanager
def _logging_to(handler: logging.Handler) -> Iterator[None]:
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)
        handler.close()


async def _serve_until_stopped(
    control: ServiceControl, settings: AgentSettings, credentials: TlsCredentials
) -> None:
    stopping = False

    async def stop_requested() -> None:
        nonlocal stopping
        # Bounded waits, abandoned on cancel: the agent may end on its own while no stop comes.
        while not await anyio.to_thread.run_sync(control.wait_for_stop, STOP_POLL_S, abandon_on_cancel=True):
            pass
        stopping = True
        wait_hint_s = settings.graceful_shutdown_s + STOP_WAIT_MARGIN_S
        control.report(ServiceStatus(ServiceState.STOP_PENDING, wait_hint_s=wait_hint_s))

    def started() -> None:
        # A stop that came before the startup finished (a shutdown) is not followed by RUNNING.
        if not stopping:
            control.report(ServiceStatus(ServiceState.RUNNING))

    await run_agent(settings, credentials, stop=stop_requested, on_started=started)


def dispatch_to_scm(load_settings: Callable[[], AgentSettings]) -> int:
    """Hand this process to the Service Control Manager and run the agent as the service; Windows only.

    Returns:
        0 once the service has stopped cleanly; a failed service has ended the process with its
        service-specific exit code by then.

    Raises:
        ServiceUnsupportedError: not on Windows, or not started by the SCM.
    """
    if sys.platform == "win32":
        return _dispatch_windows(load_settings)
    raise ServiceUnsupportedError(
        "the service command runs only under the Windows Service Control Manager; "
        "use mirbad-agent serve here (or the systemd unit, launchd job or container in docs/deploy.md)"
    )


if sys.platform == "win32":  # pragma: no cover - needs the SCM; docs/deploy.md says what to check
    import pywintypes
    import servicemanager
    import win32event
    import win32serviceutil
    import winerror

    class _FrameworkControl(ServiceControl):
        """:class:`ServiceControl` over pywin32's ``ServiceFramework`` (it counts the checkpoints)."""

        def __init__(self, framework: win32serviceutil.ServiceFramework, stop_event: object) -> None:
            self._framework = framework
            self._stop_event = stop_event

        def report(self, status: ServiceStatus) -> None:
            if status.state is ServiceState.STOPPED:
                if status.exit_code:
                    # ERROR_SERVICE_SPECIFIC_ERROR makes the SCM show (and act on) svcExitCode.
                    self._framework.ReportServiceStatus(
                        int(status.state),
                        win32ExitCode=winerror.ERROR_SERVICE_SPECIFIC_ERROR,
                        svcExitCode=status.exit_code,
                    )
                # A clean stop is reported by pywin32's host once SvcRun returns.
                return
            self._framework.ReportServiceStatus(int(status.state), waitHint=round(status.wait_hint_s * 1000))

        def wait_for_stop(self, timeout_s: float) -> bool:
            waited = win32event.WaitForSingleObject(self._stop_event, round(timeout_s * 1000))
            return bool(waited == win32event.WAIT_OBJECT_0)

    def _dispatch_windows(load_settings: Callable[[], AgentSettings]) -> int:
        class _AgentService(win32serviceutil.ServiceFramework):
            _svc_name_ = SERVICE_NAME
            _svc_display_name_ = "Mirbad node agent"

            def __init__(self, args: object) -> None:
                super().__init__(args)
                # Manual reset: the stop stays signalled for every later wait.
                self._stop_event = win32event.CreateEvent(None, True, False, None)

            # The framework accepts stop and shutdown because these two exist; both stop the agent
            # as SIGTERM does, and its models keep running.
            def SvcStop(self) -> None:  # noqa: N802 - pywin32's name
                win32event.SetEvent(self._stop_event)

            def SvcShutdown(self) -> None:  # noqa: N802 - pywin32's name
                win32event.SetEvent(self._stop_event)

            def SvcRun(self) -> None:  # noqa: N802 - pywin32's name
                # Replaces the framework's RUNNING-first sequence: RUNNING once the agent listens.
                control = _FrameworkControl(self, self._stop_event)
                handler = logging.handlers.NTEventLogHandler(EVENT_LOG_SOURCE)
                exit_code = run_service(control, load_settings, handler)
                if exit_code:
                    # pywin32's host reports STOPPED with exit code 0 once SvcRun returns, which
                    # would erase the failure just reported (and the SCM's restart actions with it).
                    logging.shutdown()
                    os._exit(exit_code)

        servicemanager.Initialize()
        servicemanager.PrepareToHostSingle(_AgentService)
        try:
            servicemanager.StartServiceCtrlDispatcher()
        except pywintypes.error as exc:
            if exc.winerror == winerror.ERROR_FAILED_SERVICE_CONTROLLER_CONNECT:
                raise ServiceUnsupportedError(
                    f"the service command is started by the Service Control Manager: Start-Service "
                    f"{SERVICE_NAME} (or mirbad-agent serve in a console)"
                ) from None
            raise
        return 0
