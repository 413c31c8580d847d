"""Restart-pending after a master restart, from the real llama-server process's command line.

The real stack: ``mirbad up`` with a second real ``mirbad-agent`` beside it, running a llama-server
model. Its definition is edited, then the master stops and starts again: the new master process never
launched the model (the instance runs on, from the agent's point of view an adopted one), yet the
model reads restart-pending and its "old -> new" list names the edited settings, read back from the
command line the agent reports for the real process. Saving the running settings again clears both.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests._support.mirbad_up import WAIT_S, Admin, Up, mirbad_up, port_block
from tests._support.polling import until
from tests._support.processes import write_exec_wrapper
from tests._support.real_parts import llama_server_path
from tests._support.second_agent import far_model, recorded_pid, second_agent

pytestmark = [
    pytest.mark.llamacpp,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the second agent runs on loopback"),
    pytest.mark.timeout(300),
]

FAR = "tiny-far"


@contextlib.contextmanager
def _master(folder: Path) -> Iterator[Up]:
    server = llama_server_path()
    assert server is not None
    wrapper = write_exec_wrapper(folder / "bin" / "llama-server", server)
    first = port_block()
    config = {
        "telemetry_interval_s": 0.5,
        "graceful_shutdown_s": 2,
        "docker": {"enabled": False},
        "process": {"port_range_start": first, "port_range_end": first + 19, "stop_timeout_s": 5},
    }
    with mirbad_up(folder, config, llama_server=wrapper) as started:
        yield started


def _changes(view: dict[str, Any]) -> list[tuple[str, object, object, bool]]:
    return [(c["field"], c["old"], c["new"], c["needsRestart"]) for c in view["changedSettings"]]


def test_restart_pending_and_the_changed_settings_survive_a_master_restart(tmp_path: Path) -> None:
    definition = far_model(FAR)
    edited = {**definition, "maxNumSeqs": 2, "extraArgs": ["--threads", "2"]}
    with contextlib.ExitStack() as closing:
        up = closing.enter_context(_master(tmp_path / "master"))
        admin = Admin(up.base_url, up.first_run_password(up.start()))
        closing.callback(admin.close)
        state = closing.enter_context(second_agent(admin, tmp_path, "gpu-2"))
        admin.ok("POST", "/api/models", json=definition)
        admin.ok("POST", f"/api/models/{FAR}/start")
        started_at = admin.wait_ready(FAR)["startedAt"]
        pid = recorded_pid(state, FAR)
        unchanged = admin.view(FAR)
        admin.ok("PUT", f"/api/models/{FAR}", json=edited)

        # A new master process: it remembers no launch of its own.
        assert up.interrupt() == 0
        up.start()
        until(
            lambda: admin.view(FAR)["status"]["state"] == "Ready",
            lambda: f"{FAR} was not seen Ready by the restarted master:\n{up.log()}",
            timeout_s=WAIT_S,
        )
        after_restart = admin.view(FAR)
        # Saving what runs again: nothing to restart for.
        admin.ok("PUT", f"/api/models/{FAR}", json=definition)
        saved_back = admin.view(FAR)
        same_pid = recorded_pid(state, FAR) == pid

    assert (unchanged["restartPending"], unchanged["changedSettings"]) == (False, [])
    assert after_restart["status"]["startedAt"] == started_at
    assert same_pid  # the instance was never restarted: the list comes from what it runs
    running_seqs = unchanged["definition"]["maxNumSeqs"]
    argv = after_restart["status"]["argv"]
    assert argv[argv.index("--parallel") + 1] == str(running_seqs)
    assert after_restart["restartPending"] is True
    assert after_restart["status"]["restartPending"] is True
    assert _changes(after_restart) == [
        ("maxNumSeqs", running_seqs, 2, True),
        ("extraArgs", ["--threads", "1"], ["--threads", "2"], True),
    ]
    assert after_restart["changedSettingsProblem"] is None
    assert (saved_back["restartPending"], saved_back["changedSettings"]) == (False, [])
    assert saved_back["changedSettingsProblem"] is None
