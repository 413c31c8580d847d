"""mirbad_runtime's HostdClient against a real hostd on its socket, and against no hostd at all."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest
from tests._support.hostd import HostdLayout, running_hostd

from mirbad_protocol.hostd import BackupShare, WhitelistAdd, WhitelistUpdate
from mirbad_runtime import (
    GpuComputeProcess,
    GpuProcessReading,
    HostdClient,
    HostdGpuProcessProbe,
    PreferredGpuProcessProbe,
)
from mirbad_runtime.exceptions import HostdRefusedError, HostdUnavailableError


def test_the_client_reads_and_acts_through_the_socket(layout: HostdLayout) -> None:
    async def scenario() -> None:
        async with HostdClient(layout.socket) as client:
            listing = await client.services()
            assert [s.entry.name for s in listing.services] == ["smartd", "syncthing"]
            everything = await client.services(include_all=True)
            assert everything.deny_patterns is not None
            assert "ssh*" in everything.deny_patterns
            with pytest.raises(HostdRefusedError) as refused:
                await client.act("smartd", "stop")
            assert (refused.value.status, refused.value.code) == (403, "confirm")
            done = await client.act("smartd", "stop", confirm="smartd")
            assert (done.unit, done.action, done.result) == ("smartd.service", "stop", "ok")
            added = await client.add_to_whitelist(WhitelistAdd(unit="nginx", confirm="nginx"))
            assert added.name == "nginx"
            updated = await client.update_whitelist("nginx", WhitelistUpdate(display_name="Web"))
            assert updated.display_name == "Web"
            removed = await client.remove_from_whitelist("nginx")
            assert removed.unit == "nginx.service"
            with pytest.raises(HostdRefusedError) as bad:
                await client.act("a/b", "start")
            assert (bad.value.status, bad.value.field) == (422, "name")
            with pytest.raises(HostdRefusedError) as denied:
                await client.act("sshd", "stop")
            assert denied.value.pattern == "ssh*"
            with pytest.raises(HostdRefusedError) as no_gpu:
                await client.gpu_processes()
            assert no_gpu.value.code == "gpu_unavailable"

    layout.write_fixtures(gpu_exit=9)
    with running_hostd(layout):
        anyio.run(scenario)


def test_gpu_processes_through_the_client(layout: HostdLayout) -> None:
    layout.gpu_apps = [{"pid": 7, "name": "python3", "used": 100}]
    layout.write_fixtures()

    async def scenario() -> None:
        async with HostdClient(layout.socket) as client:
            (process,) = await client.gpu_processes()
            assert (process.pid, process.used_mib, process.container_id) == (7, 100.0, None)

    with running_hostd(layout):
        anyio.run(scenario)


@pytest.mark.skipif(os.geteuid() != 0, reason="hostd's probe writes as another account: needs root")
def test_the_backup_share_through_the_client(layout: HostdLayout) -> None:
    layout.write_mount_fixture()
    share = BackupShare(
        kind="cifs", server="nas.local", share="backups", username="backup", password="pw, =x"
    )

    async def scenario() -> None:
        async with HostdClient(layout.socket) as client:
            assert not (await client.backup_mount()).configured
            probe = await client.test_backup_mount(share)
            assert (probe.source, probe.fs_type) == ("//nas.local/backups", "cifs")
            applied = await client.apply_backup_mount(share)
            assert (applied.configured, applied.mounted, applied.share) == (
                True,
                True,
                share.without_secret(),
            )
            again = await client.backup_mount()  # the free space is the real disk's: it moves
            assert (again.configured, again.mounted, again.share) == (True, True, applied.share)
            removed = await client.remove_backup_mount()
            assert removed.unit.endswith(".mount")
            with pytest.raises(HostdRefusedError) as gone:
                await client.remove_backup_mount()
            assert (gone.value.status, gone.value.code) == (404, "not_found")

    with running_hostd(layout):
        anyio.run(scenario)


def test_no_hostd_is_unavailable(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with HostdClient(tmp_path / "missing.sock") as client:
            with pytest.raises(HostdUnavailableError, match="cannot be reached"):
                await client.services()

    anyio.run(scenario)


def test_the_agents_gpu_probe_reads_hostd_first(layout: HostdLayout) -> None:
    container = "7c" * 32
    layout.gpu_apps = [{"pid": 7, "name": "python3", "used": 100}, {"pid": 8, "name": "ollama", "used": 50}]
    layout.write_cgroup(7, f"0::/system.slice/docker-{container}.scope\n")
    layout.write_cgroup(8, "0::/system.slice/ollama.service\n")
    layout.write_fixtures()

    async def scenario() -> None:
        async with HostdClient(layout.socket) as client:
            reading = await PreferredGpuProcessProbe([HostdGpuProcessProbe(client)]).read()
        assert reading == GpuProcessReading(
            "hostd",
            (GpuComputeProcess(7, 100.0, container), GpuComputeProcess(8, 50.0, None, "ollama.service")),
        )

    with running_hostd(layout):
        anyio.run(scenario)
