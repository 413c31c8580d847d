"""The agent as a Windows service, with a hand-written Service Control Manager.

The lifecycle is platform-free, so it runs here over a real agent on loopback: the status sequence the
SCM sees, the agent answering while RUNNING and gone after STOPPED, a failed start's exit code and its
record for the Event Log. The real SCM, the virtual account and the Event Log itself are checked on a
Windows machine (docs/deploy.md, "A Windows PC").
"""

from __future__ import annotations

import logging
import re
import shlex
import socket
import sys
import threading
from logging.handlers import RotatingFileHandler
from pathlib import Path

import httpx
import pytest
from tests._support.agent_fleet import Fleet, create_fleet
from tests._support.agent_settings import agent_settings
from tests._support.asgi_server import free_port

from mirbad_agent import (
    SERVICE_EXIT_CONFIG,
    SERVICE_EXIT_FAILED,
    SERVICE_LOG_BACKUPS,
    SERVICE_LOG_MAX_BYTES,
    SERVICE_LOG_NAME,
    START_WAIT_HINT_S,
    STOP_WAIT_MARGIN_S,
    AgentSettings,
    ServiceControl,
    ServiceState,
    ServiceStatus,
    run_service,
    service_log_handler,
)
from mirbad_agent.cli import _parser, main

WAIT_S = 30.0


class FakeScm(ServiceControl):
    """Records every status report; a test sends the stop control."""

    def __init__(self) -> None:
        self.statuses: list[ServiceStatus] = []
        self.running = threading.Event()
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def report(self, status: ServiceStatus) -> None:
        with self._lock:
            self.statuses.append(status)
        if status.state is ServiceState.RUNNING:
            self.running.set()

    def wait_for_stop(self, timeout_s: float) -> bool:
        return self._stop.wait(timeout_s)

    def send_stop(self) -> None:
        self._stop.set()

    def states(self) -> list[ServiceState]:
        with self._lock:
            return [status.state for status in self.statuses]


class EventLogStandIn(logging.Handler):
    """Stands in for ``NTEventLogHandler``: keeps the records the service routes to the Event Log."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class ServiceThread:
    """``run_service`` in its own thread, as pywin32 runs it in the SCM's service thread."""

    def __init__(self, scm: FakeScm, settings: AgentSettings, event_log: logging.Handler) -> None:
        self.exit_code: int | None = None
        self._thread = threading.Thread(target=self._run, args=(scm, settings, event_log), daemon=True)

    def _run(self, scm: FakeScm, settings: AgentSettings, event_log: logging.Handler) -> None:
        self.exit_code = run_service(scm, lambda: settings, event_log)

    def start(self) -> None:
        self._thread.start()

    def join(self) -> None:
        self._thread.join(WAIT_S)
        assert not self._thread.is_alive(), "the service did not stop"


def _settings(tmp_path: Path, fleet: Fleet | None) -> AgentSettings:
    settings = agent_settings(tmp_path, host="127.0.0.1", port=free_port(), graceful_shutdown_s=2.0)
    if fleet is not None:
        fleet.save_agent(settings.credentials_dir)
    return settings


def test_a_stop_control_takes_a_running_agent_through_stop_pending_to_stopped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)  # `mirbad-agent service --log-level info`, the default
    fleet = create_fleet()
    settings = _settings(tmp_path, fleet)
    scm = FakeScm()
    service = ServiceThread(scm, settings, EventLogStandIn())
    service.start()
    try:
        assert scm.running.wait(WAIT_S), f"never RUNNING: {scm.states()}"
        with httpx.Client(verify=fleet.master.client_context(), timeout=WAIT_S) as client:
            answer = client.get(f"https://127.0.0.1:{settings.port}/agent/v1/runtimes")
        assert answer.status_code == 200
    finally:
        scm.send_stop()
        service.join()

    assert scm.states() == [
        ServiceState.START_PENDING,
        ServiceState.RUNNING,
        ServiceState.STOP_PENDING,
        ServiceState.STOPPED,
    ]
    assert scm.statuses[0].wait_hint_s == START_WAIT_HINT_S
    assert scm.statuses[2].wait_hint_s == settings.graceful_shutdown_s + STOP_WAIT_MARGIN_S
    assert scm.statuses[-1] == ServiceStatus(ServiceState.STOPPED, exit_code=0)
    assert service.exit_code == 0
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", settings.port), timeout=WAIT_S).close()
    # No console under the SCM: the INFO lines the Event Log does not take are in the state folder.
    logged = (settings.state_dir / SERVICE_LOG_NAME).read_text(encoding="utf-8")
    assert " INFO mirbad_agent" in logged
    assert f"listening on https://127.0.0.1:{settings.port}/agent/v1" in logged
    assert all(not isinstance(handler, RotatingFileHandler) for handler in logging.getLogger().handlers)


def test_a_stop_before_the_agent_listens_is_never_followed_by_running(tmp_path: Path) -> None:
    settings = _settings(tmp_path, create_fleet())
    scm = FakeScm()
    scm.send_stop()

    assert run_service(scm, lambda: settings, EventLogStandIn()) == 0

    states = scm.states()
    assert states[0] is ServiceState.START_PENDING
    assert states[-2:] == [ServiceState.STOP_PENDING, ServiceState.STOPPED]
    assert ServiceState.RUNNING not in states[states.index(ServiceState.STOP_PENDING) :]


def test_an_agent_that_cannot_start_stops_the_service_with_its_exit_code_and_an_event_log_error(
    tmp_path: Path,
) -> None:
    settings = _settings(tmp_path, fleet=None)  # never enrolled: no certificate
    scm = FakeScm()
    event_log = EventLogStandIn()
    service = ServiceThread(scm, settings, event_log)
    service.start()
    service.join()

    assert scm.states() == [ServiceState.START_PENDING, ServiceState.STOPPED]
    assert scm.statuses[-1].exit_code == SERVICE_EXIT_CONFIG
    assert service.exit_code == SERVICE_EXIT_CONFIG
    errors = [record for record in event_log.records if record.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert "no agent certificate" in errors[0].getMessage()
    assert "no agent certificate" in (settings.state_dir / SERVICE_LOG_NAME).read_text(encoding="utf-8")
    assert event_log.level == logging.WARNING
    assert event_log not in logging.getLogger().handlers


def test_an_unexpected_failure_is_exit_code_1_with_its_traceback_in_the_event_log(tmp_path: Path) -> None:
    def broken() -> AgentSettings:
        raise RuntimeError("the disk went away")

    scm = FakeScm()
    event_log = EventLogStandIn()

    exit_code = run_service(scm, broken, event_log)

    assert exit_code == SERVICE_EXIT_FAILED
    assert scm.statuses[-1] == ServiceStatus(ServiceState.STOPPED, exit_code=SERVICE_EXIT_FAILED)
    assert [record.exc_info is not None for record in event_log.records] == [True]
    assert "the disk went away" in str(event_log.records[0].exc_info)


def test_the_service_log_takes_info_and_above_in_the_state_folder_and_rotates(tmp_path: Path) -> None:
    state = tmp_path / "state"
    handler = service_log_handler(state)
    try:
        assert (handler.level, handler.maxBytes, handler.backupCount) == (
            logging.INFO,
            SERVICE_LOG_MAX_BYTES,
            SERVICE_LOG_BACKUPS,
        )
        log = logging.getLogger("mirbad_agent.test_service_log")
        log.propagate = False
        log.addHandler(handler)
        log.setLevel(logging.DEBUG)
        log.debug("not this")
        log.info("the agent listens")
        handler.doRollover()
        log.warning("after the rotation")
    finally:
        log.removeHandler(handler)
        handler.close()
    current = (state / SERVICE_LOG_NAME).read_text(encoding="utf-8")
    rotated = (state / f"{SERVICE_LOG_NAME}.1").read_text(encoding="utf-8")
    assert "INFO mirbad_agent.test_service_log: the agent listens" in rotated
    assert "not this" not in rotated
    assert "WARNING mirbad_agent.test_service_log: after the rotation" in current


def test_a_state_folder_the_service_cannot_write_is_a_configuration_error(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    settings = agent_settings(tmp_path, state_dir=blocked / "state")
    event_log = EventLogStandIn()

    assert run_service(FakeScm(), lambda: settings, event_log) == SERVICE_EXIT_CONFIG
    assert "cannot write the service log" in event_log.records[-1].getMessage()


@pytest.mark.skipif(sys.platform == "win32", reason="on Windows the command hands itself to the SCM")
def test_the_service_command_off_windows_exits_2_saying_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["service", "--state-dir", str(tmp_path), "--no-docker"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("mirbad-agent: error: the service command runs only under the Windows")
    assert "mirbad-agent serve" in error
    assert error.count("\n") == 1


def test_the_installer_registers_the_service_command_and_restarts_on_its_exit_codes() -> None:
    # With `serve` as the binary path the SCM ended every start with error 1053.
    script = (Path(__file__).parents[2] / "deploy/agent/windows/install-windows.ps1").read_text()
    found = re.search(r'^\s*\$binaryPath = "`"\$AgentExe`" (.+)"$', script, re.MULTILINE)
    assert found is not None
    # PowerShell's `" is a quote inside the string; the SCM splits the rest as a command line.
    arguments = shlex.split(found.group(1).replace('`"', '"'))
    parsed = _parser().parse_args(arguments)
    assert parsed.command == "service"
    assert (str(parsed.config), str(parsed.state_dir)) == ("$Config", "$State")
    assert "Invoke-Sc @('failureflag', $ServiceName, '1')" in script
