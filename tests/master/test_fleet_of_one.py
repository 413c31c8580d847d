"""The pieces of ``mirbad up`` that need no process: banner, PKI on disk, the local agent's settings."""

from __future__ import annotations

import json
import logging
import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirbad_agent import AgentSettings
from mirbad_master._data_dir import INITIAL_PASSWORD_FILE, prepare_data_dir, write_initial_password
from mirbad_master._fleet_of_one import DUPLICATE_SIGNAL_S, StopSignals, banner, goodbye
from mirbad_master._llama_server_build import LLAMA_SERVER_BUILD_ENV
from mirbad_master._local_agent import agent_environment, is_enrolled, write_agent_settings
from mirbad_master._local_pki import (
    enroll_listener_names,
    load_or_create_authority,
    load_or_issue_master_identity,
)
from mirbad_master._settings import MasterSettings
from mirbad_master.exceptions import LocalAgentError
from mirbad_protocol import ModelState, ModelStatus
from mirbad_protocol.pki import certificates_to_pem, spki_pin


def test_the_banner_shows_the_password_on_the_first_run_only(tmp_path: Path) -> None:
    settings = MasterSettings(data_dir=tmp_path, port=8181)

    first = banner(settings, "s3cret")
    later = banner(settings, None)

    assert "http://127.0.0.1:8181/v1" in first
    assert "Admin password:       s3cret" in first
    assert "s3cret" not in later
    assert "mirbad admin reset-password" in later


def test_the_banner_names_the_password_file_when_stdout_is_no_terminal(tmp_path: Path) -> None:
    settings = MasterSettings(data_dir=tmp_path)
    path = write_initial_password(tmp_path, "s3cret")

    text = banner(settings, None, password_file=path)

    assert "s3cret" not in text
    assert str(tmp_path / INITIAL_PASSWORD_FILE) in text
    assert path.read_text() == "s3cret\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_stale_password_file_is_replaced_owner_only(tmp_path: Path) -> None:
    stale = tmp_path / INITIAL_PASSWORD_FILE
    stale.write_text("old")
    stale.chmod(0o644)

    write_initial_password(tmp_path, "new")

    assert stale.read_text() == "new\n"
    assert stat.S_IMODE(stale.stat().st_mode) == 0o600


def test_an_existing_data_dir_is_tightened_to_0700_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    data.chmod(0o755)

    with caplog.at_level(logging.WARNING, logger="mirbad_master"):
        prepare_data_dir(data)
    tightened = [record.getMessage() for record in caplog.records]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="mirbad_master"):
        prepare_data_dir(data)

    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    assert len(tightened) == 1
    assert "0755" in tightened[0]
    assert caplog.records == []  # already right: nothing to say


def test_a_new_data_dir_is_made_owner_only(tmp_path: Path) -> None:
    prepare_data_dir(tmp_path / "new" / "data")

    assert stat.S_IMODE((tmp_path / "new" / "data").stat().st_mode) == 0o700


def test_the_ca_is_made_once_and_the_master_identity_follows_it(tmp_path: Path) -> None:
    pki = tmp_path / "pki"
    authority = load_or_create_authority(pki)
    identity = load_or_issue_master_identity(pki, authority)

    assert spki_pin(load_or_create_authority(pki).certificate) == authority.pin
    assert load_or_issue_master_identity(pki, authority).certificate == identity.certificate
    assert stat.S_IMODE((pki / "ca.key").stat().st_mode) == 0o600
    assert stat.S_IMODE(pki.stat().st_mode) == 0o700

    for name in ("ca.crt", "ca.key"):
        (pki / name).unlink()
    replaced = load_or_create_authority(pki)
    reissued = load_or_issue_master_identity(pki, replaced)
    assert reissued.certificate != identity.certificate
    reissued.certificate.verify_directly_issued_by(replaced.certificate)


def test_the_enroll_listener_is_named_for_loopback_and_the_host() -> None:
    assert enroll_listener_names("127.0.0.1")[:2] == ["127.0.0.1", "localhost"]
    assert "10.1.2.3" in enroll_listener_names("10.1.2.3")
    assert "0.0.0.0" not in enroll_listener_names("0.0.0.0")


def test_enrolled_means_a_certificate_of_this_ca(tmp_path: Path) -> None:
    authority = load_or_create_authority(tmp_path / "pki")
    state = tmp_path / "agent"
    assert not is_enrolled(state, authority.pin)

    state.mkdir()
    (state / "agent.crt").write_text("placeholder")
    (state / "agent-ca.crt").write_bytes(certificates_to_pem([authority.certificate]))
    assert is_enrolled(state, authority.pin)
    assert not is_enrolled(state, load_or_create_authority(tmp_path / "other").pin)


def test_agent_settings_catalogue_llama_server_and_take_the_operators_file(tmp_path: Path) -> None:
    server = tmp_path / "bin" / "llama-server"
    server.parent.mkdir()
    server.write_bytes(b"#!/bin/sh\n")
    extra = tmp_path / "extra.toml"
    extra.write_text('memory_reserve_gib = 4.0\n[docker]\nnetwork = "lab"\n')
    settings = MasterSettings(data_dir=tmp_path / "data", llama_server=server, agent_config=extra)

    path = write_agent_settings(settings, 9555)

    written = json.loads(path.read_text())
    assert (written["node_name"], written["host"], written["port"]) == ("local", "127.0.0.1", 9555)
    assert written["state_dir"] == str(tmp_path / "data" / "agent")
    assert written["model_roots"] == [str(tmp_path / "data" / "models")]
    assert (tmp_path / "data" / "models").is_dir()
    # The agent catalogues it (mirbad_agent.find_llama_server, the one finder): the master only names it.
    assert written["llama_server"] == str(server)
    assert "executables" not in written
    assert written["memory_reserve_gib"] == 4.0
    assert written["docker"]["network"] == "lab"
    assert "gpus" in written["docker"]  # generated keys the operator did not set are kept
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_agent_settings_name_the_nvidia_smi_found_or_leave_the_agent_its_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # null would tell the agent the node has no GPU, though NVIDIA's kernel driver may list one.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    settings = MasterSettings(data_dir=tmp_path / "data")

    written = json.loads(write_agent_settings(settings, 9555).read_text())
    assert "nvidia_smi" not in written
    assert written["docker"]["gpus"] is False
    assert AgentSettings.model_validate(written).nvidia_smi == "nvidia-smi"

    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\n")
    smi.chmod(0o755)
    written = json.loads(write_agent_settings(settings, 9555).read_text())
    assert written["nvidia_smi"] == str(smi)
    assert written["docker"]["gpus"] is True


def test_an_unreadable_operator_file_is_one_error(tmp_path: Path) -> None:
    extra = tmp_path / "extra.json"
    extra.write_text("[1, 2]")
    settings = MasterSettings(data_dir=tmp_path / "data", agent_config=extra)

    with pytest.raises(LocalAgentError, match="must be an object"):
        write_agent_settings(settings, 9555)


def _running(model_id: str, pid: int | None) -> ModelStatus:
    return ModelStatus(id=model_id, served_name=model_id, state=ModelState.READY, pid=pid)


def test_the_last_line_names_the_models_stopped_and_left_with_their_pids() -> None:
    stopped = [_running("tiny", 4242), _running("fake", None)]

    assert goodbye(stopped, []) == (
        "Mirbad stopped (2 model(s) stopped: tiny (pid 4242), fake; none left running)."
    )
    assert goodbye([], [_running("stuck", 77)]) == (
        "Mirbad stopped (0 model(s) stopped: none; left running: stuck (pid 77))."
    )
    assert "could not be listed" in goodbye([], [], "the agent did not answer")


def _on(model_id: str, node_id: str) -> ModelStatus:
    return ModelStatus(id=model_id, served_name=model_id, state=ModelState.READY, node_id=node_id, pid=9)


def test_the_last_line_names_what_keeps_running_on_other_nodes_and_where() -> None:
    elsewhere = [(_on("big", "gpu-2"), True), (_on("emb", "gpu-3"), False)]

    assert goodbye([_running("tiny", 4242)], [], None, elsewhere) == (
        "Mirbad stopped (1 model(s) stopped: tiny (pid 4242); none left running here; still running on "
        "other nodes, which mirbad up does not stop: big on gpu-2, "
        "emb on gpu-3 (as last seen: the node does not answer))."
    )
    assert goodbye([], [_running("stuck", 77)], None, elsewhere[:1]) == (
        "Mirbad stopped (0 model(s) stopped: none; left running here: stuck (pid 77); still running on "
        "other nodes, which mirbad up does not stop: big on gpu-2)."
    )


def test_the_banner_says_how_other_machines_join_or_why_they_cannot(tmp_path: Path) -> None:
    loopback = banner(MasterSettings(data_dir=tmp_path, enroll_port=8444), None)
    everywhere = banner(MasterSettings(data_dir=tmp_path, host="0.0.0.0", enroll_port=8444), None)
    address = banner(MasterSettings(data_dir=tmp_path, host="10.1.2.3", enroll_port=8444), None)

    assert "https://127.0.0.1:8444 (--enroll-port) is on loopback only" in loopback
    assert "start with --host 0.0.0.0" in loopback
    assert "mirbad-agent enroll --master https://10.1.2.3:8444 --token TOKEN" in address
    assert "port 8444 is --enroll-port" in address
    assert "0.0.0.0" not in everywhere.split("Enroll other nodes:")[1].splitlines()[0]
    assert "use its address where other machines cannot resolve it" in everywhere


@given(gaps=st.lists(st.floats(min_value=0, max_value=5, allow_nan=False), max_size=8))
def test_one_ctrl_c_delivered_twice_stops_once_and_only_a_later_one_hurries(gaps: list[float]) -> None:
    arrivals = StopSignals()
    times = [sum(gaps[: index + 1]) for index in range(len(gaps))]

    kinds = [arrivals.classify(at) for at in [0.0, *times]]

    assert kinds[0] == "stop"
    assert kinds.count("hurry") <= 1
    for at, kind in zip(times, kinds[1:], strict=True):
        assert (kind == "duplicate") == (at < DUPLICATE_SIGNAL_S)
    later = [kind for at, kind in zip(times, kinds[1:], strict=True) if at >= DUPLICATE_SIGNAL_S]
    assert later[:1] == (["hurry"] if later else [])
    assert set(later[1:]) <= {"again"}


def test_the_doubled_sigint_of_a_group_ctrl_c_under_uv_run_is_one_stop() -> None:
    """The delivery issue 17 saw: SIGINT twice within milliseconds; the second must not hurry."""
    arrivals = StopSignals()

    assert [arrivals.classify(t) for t in (50.0, 50.15)] == ["stop", "duplicate"]


def test_the_build_command_stays_with_the_master_and_never_reaches_the_agent_or_its_models() -> None:
    # The agent hands its environment on to every llama-server it starts.
    master = {"PATH": "/usr/bin", LLAMA_SERVER_BUILD_ENV: '["uv", "sync"]', "MIRBAD_OTHER": "1"}

    env = agent_environment(master)

    assert LLAMA_SERVER_BUILD_ENV not in env
    assert env == {"PATH": "/usr/bin", "MIRBAD_OTHER": "1", "PYTHONUNBUFFERED": "1"}
