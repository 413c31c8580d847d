"""The master's host services: host-services.json, and the manager over a real agent.

The agent is its Starlette app behind an :class:`AgentClient` (httpx's ASGI transport); behind it a
real hostd on its unix socket (stand-in systemctl) and the real dockerd with throwaway containers of
this run, so every refusal the master makes is shown to leave the node untouched.
"""

from __future__ import annotations

import contextlib
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest
from tests._support.docker_image import RUN_LABEL
from tests._support.hostd import HostdLayout, hostd_layout, running_hostd, unit

from mirbad_agent import AgentServices, HostServicesGateway, NodeRuntimes, create_app
from mirbad_orchestration.exceptions import (
    AgentRequestError,
    ContainerNotWhitelistedError,
    HostServiceConfirmError,
    HostServicesFileError,
    WhitelistChangeRefusedError,
)
from mirbad_orchestration.fleet import AgentClient
from mirbad_orchestration.services import HostServiceManager, HostServicesStore, WhitelistedContainer
from mirbad_protocol.hostd import WhitelistAdd, WhitelistUpdate
from mirbad_runtime import ContainerServices, MemoryProbe

pytestmark = pytest.mark.anyio

NODE = "node-1"
PYTHON = str(Path(sys.executable).resolve())
SLEEPER = ["-c", "import signal, sys, time; signal.signal(15, lambda *_: sys.exit(0)); time.sleep(600)"]


async def test_the_file_is_seeded_once(tmp_path: Path) -> None:
    seed = [WhitelistedContainer(node=NODE, name="postgres")]
    store = HostServicesStore(tmp_path, seed)
    assert [c.name for c in (await store.read()).containers] == ["postgres"]
    await store.update(lambda document: document.model_copy(update={"containers": []}))
    # A later start with the same seed keeps what the file says: a removed container stays removed.
    assert (await HostServicesStore(tmp_path, seed).read()).containers == []


async def test_a_corrupt_file_fails_closed(tmp_path: Path) -> None:
    store = HostServicesStore(tmp_path, [WhitelistedContainer(node=NODE, name="postgres")])
    store.path.write_text('{"containers": [{"node": 1}]}')
    with pytest.raises(HostServicesFileError):
        await store.read()

    async def no_node(node: str) -> AgentClient:
        pytest.fail("no node may be asked")

    manager = HostServiceManager(store, no_node)
    with pytest.raises(HostServicesFileError):
        await manager.container_action(NODE, "postgres", "stop")
    assert store.path.read_text() == '{"containers": [{"node": 1}]}'


@pytest.fixture
def layout(tmp_path: Path) -> Iterator[HostdLayout]:
    with hostd_layout(tmp_path) as made:
        made.units = {"system": [unit("smartd.service"), unit("nginx.service"), unit("ssh.service")]}
        made.write_seed([{"name": "smartd", "unit": "smartd.service", "protected": True}])
        made.write_fixtures()
        yield made


@pytest.fixture
async def manager(layout: HostdLayout, tmp_path: Path) -> AsyncIterator[HostServiceManager]:
    services = AgentServices(
        runtimes=NodeRuntimes([]),
        memory=MemoryProbe(linux=False, fake_total_gib=16.0),
        node_name=NODE,
        version="0.0.test",
        host_services=HostServicesGateway(layout.socket),
        host_containers=ContainerServices(),
    )
    transport = httpx.ASGITransport(app=create_app(services, background=False))
    with running_hostd(layout):
        async with services:
            client = AgentClient(NODE, "http://agent", transport)
            try:

                async def client_for(node: str) -> AgentClient:
                    return client

                yield HostServiceManager(HostServicesStore(tmp_path / "data"), client_for)
            finally:
                await client.aclose()


async def test_units_keep_the_masters_checks_before_the_node_is_asked(
    manager: HostServiceManager, layout: HostdLayout
) -> None:
    with pytest.raises(HostServiceConfirmError):
        await manager.unit_action(NODE, "smartd", "stop")
    assert layout.actions_run() == []
    done = await manager.unit_action(NODE, "smartd", "stop", confirm="smartd")
    assert done.result == "ok"
    with pytest.raises(WhitelistChangeRefusedError):
        await manager.add_unit(NODE, WhitelistAdd(unit="nginx", confirm="nginx"), principal=None)
    added = await manager.add_unit(NODE, WhitelistAdd(unit="nginx", confirm="nginx"), principal="admin")
    assert added.name == "nginx"
    with pytest.raises(HostServiceConfirmError):
        await manager.update_unit(NODE, "smartd", WhitelistUpdate(protected=False), principal="admin")
    # The deny list stays hostd's: the master passes the refusal on.
    with pytest.raises(AgentRequestError) as denied:
        await manager.add_unit(NODE, WhitelistAdd(unit="ssh", confirm="ssh"), principal="admin")
    assert (denied.value.status_code, denied.value.code) == (403, "denied")


@pytest.fixture
def containers(docker_client: Any, image: str) -> Iterator[dict[str, str]]:
    run_id = f"hsm-{uuid.uuid4().hex[:10]}"
    made: dict[str, str] = {}
    try:
        for suffix, restart in (("db", "always"), ("cache", None)):
            name = f"{run_id}-{suffix}"
            options: dict[str, Any] = {"restart_policy": {"Name": restart}} if restart else {}
            docker_client.containers.run(
                image,
                SLEEPER,
                entrypoint=[PYTHON],
                name=name,
                detach=True,
                labels={RUN_LABEL: run_id},
                **options,
            )
            made[suffix] = name
        yield made
    finally:
        for container in docker_client.containers.list(all=True, filters={"label": f"{RUN_LABEL}={run_id}"}):
            with contextlib.suppress(docker.errors.NotFound):
                container.remove(force=True)


def _policy(docker_client: Any, name: str) -> str:
    return str(docker_client.api.inspect_container(name)["HostConfig"]["RestartPolicy"]["Name"])


@pytest.mark.docker
async def test_containers_outside_the_whitelist_are_refused(
    manager: HostServiceManager, containers: dict[str, str], docker_client: Any
) -> None:
    db = containers["db"]
    with pytest.raises(ContainerNotWhitelistedError):
        await manager.container_action(NODE, db, "stop")
    with pytest.raises(ContainerNotWhitelistedError):
        await manager.container_autostart(NODE, db, False)
    with pytest.raises(WhitelistChangeRefusedError):
        await manager.add_container(NODE, db, confirm=db, principal=None)
    with pytest.raises(HostServiceConfirmError):
        await manager.add_container(NODE, db, confirm="wrong", principal="admin")
    assert docker_client.containers.get(db).status == "running"
    assert _policy(docker_client, db) == "always"


@pytest.mark.docker
async def test_actions_and_autostart_remember_the_old_policy(
    manager: HostServiceManager, containers: dict[str, str], docker_client: Any
) -> None:
    db, cache = containers["db"], containers["cache"]
    await manager.add_container(NODE, db, confirm=db, principal="admin", protected=True)
    await manager.add_container(NODE, cache, confirm=cache, principal="admin")
    with pytest.raises(HostServiceConfirmError):
        await manager.container_action(NODE, db, "stop")
    await manager.container_action(NODE, db, "stop", confirm=db)
    assert docker_client.containers.get(db).status == "exited"
    await manager.container_action(NODE, db, "start")
    assert docker_client.containers.get(db).status == "running"

    with pytest.raises(HostServiceConfirmError):
        await manager.container_autostart(NODE, db, False)
    assert (await manager.container_autostart(NODE, db, False, confirm=db)).autostart is False
    assert _policy(docker_client, db) == "no"
    assert (await manager.container_autostart(NODE, db, True)).restart_policy.name == "always"
    # A container that never had a policy gets unless-stopped.
    assert (await manager.container_autostart(NODE, cache, True)).restart_policy.name == "unless-stopped"

    with pytest.raises(HostServiceConfirmError):
        await manager.update_container(NODE, db, principal="admin", protected=False)
    await manager.remove_container(NODE, cache, principal="admin")
    with pytest.raises(ContainerNotWhitelistedError):
        await manager.container_action(NODE, cache, "stop")


@pytest.mark.docker
async def test_the_whitelist_binds_the_container_not_its_name(
    manager: HostServiceManager, containers: dict[str, str], docker_client: Any, image: str
) -> None:
    # issue 31 item 13: anyone who may run containers can reuse a whitelisted name.
    db = containers["db"]
    entry = await manager.add_container(NODE, db, confirm=db, principal="admin")
    original = docker_client.containers.get(db)
    assert entry.container_id == original.id
    original.remove(force=True)
    labels = original.labels
    docker_client.containers.run(image, SLEEPER, entrypoint=[PYTHON], name=db, detach=True, labels=labels)
    with pytest.raises(ContainerNotWhitelistedError, match="replaced"):
        await manager.container_action(NODE, db, "stop")
    with pytest.raises(ContainerNotWhitelistedError, match="replaced"):
        await manager.container_autostart(NODE, db, False)
    assert docker_client.containers.get(db).status == "running"
    # Whitelisting it again binds the new container.
    await manager.add_container(NODE, db, confirm=db, principal="admin")
    await manager.container_action(NODE, db, "stop")
    assert docker_client.containers.get(db).status == "exited"


@pytest.mark.docker
async def test_a_seeded_container_binds_the_one_its_first_action_finds(
    manager: HostServiceManager, containers: dict[str, str], docker_client: Any
) -> None:
    cache = containers["cache"]
    store = manager._store
    await store.update(
        lambda document: document.model_copy(
            update={"containers": [WhitelistedContainer(node=NODE, name=cache)]}
        )
    )
    await manager.container_action(NODE, cache, "restart")
    bound = (await store.read()).find(NODE, cache)
    assert bound is not None
    assert bound.container_id == docker_client.containers.get(cache).id
