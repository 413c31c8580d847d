"""The agent's ``/host/...`` routes in-process, passed through to a real hostd on its unix socket.

hostd runs as a real process (tests/_support/hostd.py) with the stand-in systemctl and nvidia-smi; the
agent is its Starlette app over httpx's ASGI transport, so every call crosses the real socket.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from tests._support.hostd import HostdLayout, hostd_layout, running_hostd, unit

from mirbad_agent import AgentServices, HostServicesGateway, NodeRuntimes, create_app
from mirbad_protocol.agent import FeatureFlag
from mirbad_runtime import MemoryProbe

pytestmark = pytest.mark.anyio

BASE = "http://agent/agent/v1"


@pytest.fixture
def layout(tmp_path: Path) -> Iterator[HostdLayout]:
    with hostd_layout(tmp_path) as made:
        made.units = {
            "system": [
                unit("smartd.service", memory=30 * 1024 * 1024),
                unit("nginx.service", memory=200 * 1024 * 1024),
                unit("ssh.service"),
            ]
        }
        made.gpu_apps = [{"pid": 7, "name": "python3", "used": 100}]
        made.write_seed(
            [
                {"name": "smartd", "unit": "smartd.service", "displayName": "SMART disks", "protected": True},
                {"name": "nginx", "unit": "nginx.service"},
            ]
        )
        made.write_fixtures()
        yield made


def _services(gateway: HostServicesGateway | None) -> AgentServices:
    return AgentServices(
        runtimes=NodeRuntimes([]),
        memory=MemoryProbe(linux=False, fake_total_gib=16.0),
        node_name="node-1",
        version="0.0.test",
        host_services=gateway,
    )


async def _agent(socket: Path | None) -> AsyncIterator[tuple[httpx.AsyncClient, AgentServices]]:
    services = _services(HostServicesGateway(socket) if socket is not None else None)
    transport = httpx.ASGITransport(app=create_app(services, background=False))
    async with services, httpx.AsyncClient(transport=transport, base_url=BASE) as client:
        yield client, services


@pytest.fixture
async def agent(layout: HostdLayout) -> AsyncIterator[tuple[httpx.AsyncClient, AgentServices]]:
    with running_hostd(layout):
        async for pair in _agent(layout.socket):
            yield pair


def _error(response: httpx.Response) -> tuple[int, str, str | None]:
    error = response.json()["error"]
    return response.status_code, error["code"], error.get("field")


async def test_services_and_discovery_pass_through(agent: tuple[httpx.AsyncClient, AgentServices]) -> None:
    client, _ = agent
    listing = (await client.get("/host/services")).json()
    assert [s["entry"]["name"] for s in listing["services"]] == ["nginx", "smartd"]
    assert "discovered" not in listing
    everything = (await client.get("/host/services", params={"include": "all"})).json()
    assert "ssh*" in everything["denyPatterns"]
    ssh = next(d for d in everything["discovered"] if d["unit"] == "ssh.service")
    assert (ssh["denied"], ssh["denyPattern"]) == (True, "ssh*")


async def test_actions_reach_systemctl_and_refusals_keep_hostds_envelope(
    agent: tuple[httpx.AsyncClient, AgentServices], layout: HostdLayout
) -> None:
    client, _ = agent
    started = await client.post("/host/services/nginx/start")
    assert started.status_code == 202
    assert started.json() == {"name": "nginx", "unit": "nginx.service", "action": "start", "result": "ok"}
    assert _error(await client.post("/host/services/smartd/stop")) == (403, "confirm", None)
    wrong = await client.post("/host/services/smartd/stop", params={"confirm": "nginx"})
    assert _error(wrong) == (403, "confirm", None)
    assert (await client.post("/host/services/smartd/stop", params={"confirm": "smartd"})).status_code == 202
    denied = await client.post("/host/services/ssh/stop")
    assert _error(denied) == (403, "denied", None)
    assert denied.json()["error"]["pattern"] == "ssh*"
    assert _error(await client.post("/host/services/unknown/start")) == (404, "not_found", None)
    assert _error(await client.post("/host/services/nginx/explode")) == (404, "not_found", None)
    assert _error(await client.post("/host/services/a%2Fb/start")) == (422, "invalid_request", "name")
    assert _error(await client.get("/host/services", params={"include": "x"})) == (
        422,
        "invalid_request",
        "include",
    )
    actions = [argv[argv.index("--no-block") + 1 :] for argv in layout.actions_run()]
    assert actions == [["start", "--", "nginx.service"], ["stop", "--", "smartd.service"]]


async def test_whitelist_changes_pass_through(agent: tuple[httpx.AsyncClient, AgentServices]) -> None:
    client, _ = agent
    denied = await client.post("/host/whitelist", json={"unit": "ssh", "confirm": "ssh"})
    assert _error(denied)[:2] == (403, "denied")
    # The agent reads the body as a wire message: a missing field is refused with its name ...
    assert _error(await client.post("/host/whitelist", json={"unit": "nginx"})) == (
        400,
        "invalid_request",
        "confirm",
    )
    # ... and a field it does not know (a password) is dropped, never passed on: hostd then answers
    # for the unit itself (not loaded here), not with a 422 naming `password`.
    extra = await client.post("/host/whitelist", json={"unit": "x", "confirm": "x", "password": "p"})
    assert _error(extra)[:2] == (409, "unit_unavailable")
    smart = await client.patch("/host/whitelist/smartd", json={"protected": False})
    assert _error(smart) == (403, "confirm", None)
    updated = await client.patch("/host/whitelist/nginx", json={"displayName": "Web"})
    assert updated.json()["displayName"] == "Web"
    removed = await client.delete("/host/whitelist/nginx")
    assert removed.json()["unit"] == "nginx.service"
    assert [s["entry"]["name"] for s in (await client.get("/host/services")).json()["services"]] == ["smartd"]


async def test_gpu_processes_pass_through(agent: tuple[httpx.AsyncClient, AgentServices]) -> None:
    client, _ = agent
    processes = (await client.get("/host/gpu-processes")).json()
    assert processes == [{"pid": 7, "name": "python3", "usedMiB": 100.0}]


async def test_the_feature_flag_follows_hostd(agent: tuple[httpx.AsyncClient, AgentServices]) -> None:
    client, services = agent
    assert FeatureFlag.HOST_SERVICES.value not in (await client.get("/runtimes")).json()["features"]
    assert services.host_services is not None
    assert await services.host_services.probe()
    assert FeatureFlag.HOST_SERVICES.value in (await client.get("/runtimes")).json()["features"]


@pytest.mark.parametrize("configured", [True, False], ids=["socket-missing", "hostd-off"])
async def test_a_node_without_hostd_answers_503_and_reports_no_flag(tmp_path: Path, configured: bool) -> None:
    async for client, services in _agent(tmp_path / "missing.sock" if configured else None):
        if services.host_services is not None:
            assert not await services.host_services.probe()
        assert FeatureFlag.HOST_SERVICES.value not in (await client.get("/runtimes")).json()["features"]
        for response in (
            await client.get("/host/services"),
            await client.post("/host/services/nginx/start"),
            await client.post("/host/whitelist", json={"unit": "nginx", "confirm": "nginx"}),
            await client.delete("/host/whitelist/nginx"),
            await client.get("/host/gpu-processes"),
        ):
            assert _error(response) == (503, "hostd_unavailable", None)


async def test_a_hostd_that_stops_answering_drops_the_flag(layout: HostdLayout) -> None:
    with running_hostd(layout) as hostd:
        async for client, _ in _agent(layout.socket):
            assert (await client.get("/host/services")).status_code == 200
            assert FeatureFlag.HOST_SERVICES.value in (await client.get("/runtimes")).json()["features"]
            hostd.process.terminate()
            hostd.process.wait(timeout=15)
            assert _error(await client.get("/host/services"))[:2] == (503, "hostd_unavailable")
            assert FeatureFlag.HOST_SERVICES.value not in (await client.get("/runtimes")).json()["features"]


SHARE = {
    "kind": "cifs",
    "server": "nas.local",
    "share": "backups",
    "username": "backup",
    "password": "s3cret, =%'pass",
}
_AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="hostd's probe writes as another account: needs root")


@_AS_ROOT
async def test_the_backup_share_passes_through_and_its_flag_follows_hostd(
    agent: tuple[httpx.AsyncClient, AgentServices], layout: HostdLayout
) -> None:
    client, services = agent
    layout.write_mount_fixture()
    assert services.host_services is not None
    assert await services.host_services.probe()
    assert FeatureFlag.HOST_BACKUP_MOUNT.value in (await client.get("/runtimes")).json()["features"]
    before = (await client.get("/host/backup-mount")).json()
    assert (before["target"], before.get("configured", False)) == (str(layout.backup_target), False)
    tested = await client.post("/host/backup-mount/test", json=SHARE)
    assert tested.status_code == 200, tested.text
    assert tested.json()["source"] == "//nas.local/backups"
    assert not layout.backup_state.exists()  # a test writes nothing
    applied = await client.put("/host/backup-mount", json=SHARE)
    assert applied.status_code == 200, applied.text
    assert applied.json()["configured"] is True
    assert applied.json()["mounted"] is True
    assert "password" not in applied.json()["share"]
    removed = await client.delete("/host/backup-mount")
    assert removed.status_code == 200, removed.text
    assert removed.json()["unit"].endswith(".mount")
    assert _error(await client.delete("/host/backup-mount"))[:2] == (404, "not_found")


@_AS_ROOT
async def test_backup_share_refusals_keep_hostds_envelope(
    agent: tuple[httpx.AsyncClient, AgentServices], layout: HostdLayout
) -> None:
    client, _ = agent
    layout.write_mount_fixture()
    bad = await client.put("/host/backup-mount", json=SHARE | {"server": "nas,uid=0"})
    assert _error(bad) == (422, "invalid_request", "server")
    assert "s3cret" not in bad.text
    unprintable = await client.post("/host/backup-mount/test", json=SHARE | {"password": "two\nlines"})
    assert _error(unprintable) == (422, "invalid_request", "password")
    assert "lines" not in unprintable.text
    layout.backup_target.joinpath("x").mkdir()
    layout.mountinfo.write_text(
        layout.mountinfo.read_text() + f"70 21 0:70 / {layout.backup_target} rw - ext4 /dev/sdz1 rw\n"
    )
    assert _error(await client.put("/host/backup-mount", json=SHARE))[:2] == (409, "mount_conflict")


async def test_a_node_without_hostd_offers_no_backup_share(tmp_path: Path) -> None:
    async for client, services in _agent(tmp_path / "missing.sock"):
        assert services.host_services is not None
        assert not await services.host_services.probe()
        assert FeatureFlag.HOST_BACKUP_MOUNT.value not in (await client.get("/runtimes")).json()["features"]
        for response in (
            await client.get("/host/backup-mount"),
            await client.put("/host/backup-mount", json=SHARE),
            await client.post("/host/backup-mount/test", json=SHARE),
            await client.delete("/host/backup-mount"),
        ):
            assert _error(response) == (503, "hostd_unavailable", None)
