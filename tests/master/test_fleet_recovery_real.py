"""Fleet recovery end to end: the master's disk is lost, a new master recovers the fleet from a backup.

The real stack, as docs/fleet-recovery.md tells an operator to do it: ``mirbad up`` (the master and its
local agent) with a second real ``mirbad-agent`` enrolled beside it, running a llama-server model; an
API key; a passphrase backup. The master stops and its data directory is deleted; ``mirbad up
--recover`` on a fresh directory (the passphrase in ``MIRBAD_BACKUP_PASSPHRASE``) brings the fleet back:
the second agent is reached without enrolling again (its certificate is the one it had), its model was
never restarted (same pid, same start time, alive throughout) and answers through ``/v1`` with the old
key, and the master's epoch is one above the backup's. Started again with the same request, it starts
as itself (no second recovery, no second epoch).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests._support.fleet_backup import write_fleet_backup
from tests._support.mirbad_up import WAIT_S, Admin, Up, mirbad_up, port_block
from tests._support.polling import until
from tests._support.processes import write_exec_wrapper
from tests._support.real_parts import llama_server_path
from tests._support.second_agent import far_model, recorded_pid, second_agent

from mirbad_agent import FENCE_FILE_NAME

pytestmark = [
    pytest.mark.llamacpp,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="checks processes through /proc"),
    pytest.mark.timeout(300),
]

PASSPHRASE = "a long enough passphrase"
FAR = "tiny-far"


def _agent_config() -> dict[str, object]:
    first = port_block()
    return {
        "telemetry_interval_s": 0.5,
        "graceful_shutdown_s": 2,
        "docker": {"enabled": False},
        "process": {"port_range_start": first, "port_range_end": first + 19, "stop_timeout_s": 5},
    }


@contextlib.contextmanager
def _master(folder: Path, env: dict[str, str] | None = None) -> Iterator[Up]:
    server = llama_server_path()
    assert server is not None
    wrapper = write_exec_wrapper(folder / "bin" / "llama-server", server)
    with mirbad_up(folder, _agent_config(), llama_server=wrapper, env=env) as started:
        yield started


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


class _Watch:
    """Checks in a thread, until stopped, that a process stays alive; remembers if it ever was not."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.died = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            if not _alive(self.pid):
                self.died = True
                return

    def stop(self) -> bool:
        """Stop watching; True when the process stayed alive all along."""
        self._stop.set()
        self._thread.join(WAIT_S)
        return not self.died and _alive(self.pid)


def _far_status(admin: Admin) -> dict[str, object]:
    status: dict[str, object] = admin.view(FAR)["status"]
    return status


def _chat(base_url: str, secret: str) -> httpx.Response:
    return httpx.post(
        f"{base_url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {secret}"},
        json={"model": "tiny-far", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8},
        timeout=WAIT_S,
        trust_env=False,
    )


def _fence_of(state: Path) -> dict[str, object] | None:
    """The master the agent follows, once one above the lost master's epoch 0 claimed it."""
    path = state / FENCE_FILE_NAME
    fence: dict[str, object] = json.loads(path.read_text()) if path.exists() else {}
    return fence if fence.get("epoch") == 1 else None


def test_a_new_master_recovers_the_fleet_and_the_running_model_is_never_restarted(tmp_path: Path) -> None:
    with contextlib.ExitStack() as closing:
        old = closing.enter_context(_master(tmp_path / "old"))
        admin = Admin(old.base_url, old.first_run_password(old.start()))
        closing.callback(admin.close)
        state = closing.enter_context(second_agent(admin, tmp_path, "gpu-2"))
        admin.ok("POST", "/api/models", json=far_model(FAR))
        admin.ok("POST", f"/api/models/{FAR}/start")
        started_at = admin.wait_ready(FAR)["startedAt"]
        secret = admin.ok("POST", "/api/keys", json={"name": "notebook"})["secret"]
        assert _chat(old.base_url, secret).status_code == 200
        pid = recorded_pid(state, FAR)
        certificate = (state / "agent.crt").read_bytes()
        watch = _Watch(pid)

        backup = write_fleet_backup(old.data_dir, tmp_path / "backups", PASSPHRASE)
        lost = json.loads((old.data_dir / "master-identity.json").read_text())
        # The master's disk is lost: it stops (its own node's models with it) and its data is gone.
        assert old.interrupt() == 0
        shutil.rmtree(old.data_dir)

        new = closing.enter_context(_master(tmp_path / "new", env={"MIRBAD_BACKUP_PASSPHRASE": PASSPHRASE}))
        banner = new.start(args=["--recover", str(backup)])
        admin = Admin(new.base_url, new.first_run_password(banner))
        closing.callback(admin.close)

        until(
            lambda: any(n["id"] == "gpu-2" and n["reachable"] for n in admin.ok("GET", "/api/nodes")),
            lambda: f"gpu-2 was not reached by the new master:\n{new.log()}",
            timeout_s=WAIT_S,
        )
        # The recovered master claimed the node: its fence is at the recovered epoch (docs/takeover.md).
        fence = until(
            lambda: _fence_of(state),
            lambda: f"gpu-2 was not claimed by the new master:\n{new.log()}",
            timeout_s=WAIT_S,
        )
        status = _far_status(admin)
        chat = _chat(new.base_url, secret)
        stranger = _chat(new.base_url, "mb-not-a-key")
        identity = json.loads((new.data_dir / "master-identity.json").read_text())
        audit = [
            json.loads(line)
            for path in (new.data_dir / "audit").iterdir()
            for line in path.read_text().splitlines()
        ]
        listed = json.loads((new.data_dir / "running-models.json").read_text())
        # Started again with the same request (a container whose environment still names the backup):
        # the directory holds that master, so it starts as itself, not recovered once more.
        assert new.interrupt() == 0
        again = new.start(args=["--recover", str(backup)])
        admin.wait_ready(FAR)
        status_again = _far_status(admin)
        identity_again = json.loads((new.data_dir / "master-identity.json").read_text())
        same_certificate = (state / "agent.crt").read_bytes() == certificate
        same_pid = recorded_pid(state, FAR) == pid
        never_restarted = watch.stop()

    assert any(line.startswith("Recovered the fleet from") for line in banner), banner
    assert status["state"] == "Ready"
    assert status["startedAt"] == started_at
    assert same_pid
    assert never_restarted
    assert same_certificate  # the agent never enrolled again
    assert chat.status_code == 200, chat.text
    assert chat.json()["choices"][0]["message"]["content"]
    assert stranger.status_code == 401
    assert identity == {"instanceId": lost["instanceId"], "epoch": lost["epoch"] + 1}
    assert fence == identity
    actions = {(entry["actor"], entry["action"], entry["target"]) for entry in audit}
    assert ("system:recovery", "fleet.recover", backup.name) in actions
    assert ("system:recovery", "model.adopt", FAR) in actions
    assert FAR in listed["nodes"]["gpu-2"]["models"]
    assert any("already holds that master" in line for line in again), again
    assert identity_again == identity
    assert status_again["startedAt"] == started_at
