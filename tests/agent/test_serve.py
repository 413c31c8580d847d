"""How the agent serves: its idle timeout outlasts every client's reuse of an idle connection."""

from __future__ import annotations

from pathlib import Path

from starlette.applications import Starlette
from tests._support.agent_settings import agent_settings
from tests.orchestration._fleet_pki import FleetPki

from mirbad_agent import server_config
from mirbad_orchestration.fleet import DEFAULT_POLL_INTERVAL_S
from mirbad_protocol import AGENT_CLIENT_KEEPALIVE_S, AGENT_IDLE_TIMEOUT_S


def test_the_agent_closes_idle_connections_only_after_its_clients_stop_reusing_them(tmp_path: Path) -> None:
    # Both sides at 5 s and a poll every 5 s: a poll now and then went out on a connection the agent
    # was closing ("Server disconnected"), and an idle node was marked unreachable every few minutes.
    config = server_config(Starlette(), agent_settings(tmp_path), FleetPki.create().agent("node-1"))

    assert config.timeout_keep_alive == AGENT_IDLE_TIMEOUT_S
    assert DEFAULT_POLL_INTERVAL_S < AGENT_CLIENT_KEEPALIVE_S < AGENT_IDLE_TIMEOUT_S / 1.5
