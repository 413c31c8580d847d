"""Which drivers an agent composes: every one its machine supports, and a node with none still serves."""

from __future__ import annotations

import hashlib
import logging
import os
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests._support.agent_settings import agent_settings as settings

from mirbad_agent import compose_services, create_app, platform_key_protector, process_driver
from mirbad_protocol import ExecutableRef, ProcessLaunch
from mirbad_protocol.agent import ContainerRuntimeInfo, ProcessRuntimeInfo, StartRequest
from mirbad_runtime import (
    ContainerDriver,
    DpapiInstanceKeyProtector,
    FileInstanceKeyProtector,
    PosixProcessHost,
    ProcessDriver,
)
from mirbad_runtime.testing import FakeDpapi, FakeProcessHost

pytestmark = pytest.mark.anyio

SHA = "0" * 64


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]


async def test_a_node_with_neither_runtime_warns_once_and_refuses_launches(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with await compose_services(settings(tmp_path)) as services:
        transport = httpx.ASGITransport(app=create_app(services, background=False))
        async with httpx.AsyncClient(transport=transport, base_url="http://agent/agent/v1") as client:
            info = (await client.get("/runtimes")).json()
            refused = await client.post("/models/tiny/start", json=_process_start())
    [warning] = warnings(caplog)
    assert "no runtime is available" in warning
    assert "docker.enabled = false" in warning
    assert "process.enabled = false" in warning
    assert services.runtimes.runtimes == []
    assert "runtimes" not in info
    assert refused.status_code == 422
    assert refused.json()["error"]["code"] == "spec_rejected"


async def test_an_unreachable_docker_is_left_out(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    unreachable = {"enabled": True, "url": f"unix://{tmp_path}/no-docker.sock", "probe_timeout_s": 2}
    async with await compose_services(settings(tmp_path, docker=unreachable)) as services:
        pass
    [warning] = warnings(caplog)
    assert "Docker does not answer" in warning
    assert services.runtimes.drivers == ()


@pytest.mark.skipif(os.name != "posix", reason="the POSIX process host and key protector")
async def test_the_process_driver_is_composed_where_the_platform_has_a_host(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    executables = [
        {"name": "llama-server", "version": "b2", "path": "/opt/llama/b2/llama-server", "sha256": SHA},
        {"name": "llama-server", "version": "b1", "path": "/opt/llama/b1/llama-server", "sha256": SHA},
    ]
    chosen = settings(
        tmp_path, process={"enabled": True, "runtimes": ["llamacpp", "mlx"]}, executables=executables
    )
    async with await compose_services(chosen) as services:
        [composed] = services.runtimes.drivers
    refs = [
        ExecutableRef(name="llama-server", version="b1"),
        ExecutableRef(name="llama-server", version="b2"),
    ]
    assert isinstance(composed.driver, ProcessDriver)
    assert composed.runtimes == (
        ProcessRuntimeInfo(runtime="llamacpp", executables=refs),
        ProcessRuntimeInfo(runtime="mlx", executables=refs),
    )
    assert services.catalog is composed.catalog
    assert warnings(caplog) == []
    assert (tmp_path / "state").stat().st_mode & 0o777 == 0o700


def test_the_process_driver_needs_a_host_a_key_protector_and_a_root(tmp_path: Path) -> None:
    chosen = settings(tmp_path, process={"enabled": True})
    keys = FileInstanceKeyProtector(tmp_path / "keys")
    rootless = chosen.model_copy(update={"model_roots": []})
    assert "no process host" in str(process_driver(chosen, None, keys))
    assert "no instance-key protector" in str(process_driver(chosen, PosixProcessHost(), None))
    assert "model root" in str(process_driver(rootless, PosixProcessHost(), keys))
    assert "process.enabled = false" in str(process_driver(settings(tmp_path), PosixProcessHost(), keys))


async def test_a_docker_off_node_without_a_process_host_warns_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    chosen = settings(tmp_path, process={"enabled": True})
    async with await compose_services(chosen, process_host=lambda: None) as without_host:
        pass
    [warning] = warnings(caplog)
    assert "this platform has no process host" in warning
    assert without_host.runtimes.drivers == ()


@pytest.mark.docker
@pytest.mark.skipif(os.name != "posix", reason="the POSIX process host and key protector")
async def test_a_linux_pc_composes_containers_and_processes(tmp_path: Path) -> None:
    chosen = settings(tmp_path, docker={"enabled": True}, process={"enabled": True})
    async with await compose_services(chosen) as services:
        drivers = [type(composed.driver) for composed in services.runtimes.drivers]
        features = services.info().features
    assert drivers == [ContainerDriver, ProcessDriver]
    assert services.runtimes.runtimes[0] == ContainerRuntimeInfo(runtime="vllm", network="mirbad")
    assert {"runtime.vllm.container", "runtime.llamacpp.process"} <= set(features)
    assert (tmp_path / "state" / "cache").is_dir()


async def test_the_download_bounds_reach_the_download_manager(tmp_path: Path) -> None:
    downloads = {
        "read_timeout_s": 5,
        "plan_timeout_s": 20,
        "max_info_bytes": 65536,
        "min_bytes_per_second": 1,
    }
    async with await compose_services(settings(tmp_path, downloads=downloads)) as services:
        assert services.downloads is not None
        limits = services.downloads.limits
    assert (limits.read_timeout_s, limits.plan_timeout_s, limits.max_info_bytes) == (5, 20, 65536)
    assert (limits.min_bytes_per_second, limits.connect_timeout_s, limits.max_planning) == (1, 10, 4)


async def test_the_proxy_idle_timeout_reaches_the_proxy(tmp_path: Path) -> None:
    async with await compose_services(settings(tmp_path)) as defaults:
        assert defaults.proxy_idle_timeout_s == 600
    async with await compose_services(settings(tmp_path, proxy_idle_timeout_s=45)) as chosen:
        assert chosen.proxy_idle_timeout_s == 45


def _process_start() -> dict[str, Any]:
    spec = ProcessLaunch(
        model_id="tiny",
        served_name="tiny",
        runtime="llamacpp",
        argv=[],
        model_path="tiny.gguf",
        budget_gib=1,
        config_hash="0123456789abcdef",
        executable=ExecutableRef(name="llama-server", version="b1"),
    )
    return StartRequest(spec=spec).to_wire()


def _windows_workspace(tmp_path: Path) -> list[dict[str, str]]:
    """A model file and a catalogued wrapper (real files: the launch checks the digest)."""
    (tmp_path / "models" / "m").mkdir(parents=True)
    (tmp_path / "models" / "m" / "tiny.gguf").write_bytes(b"weights")
    wrapper = tmp_path / "bin" / "llama-server.exe"
    wrapper.parent.mkdir()
    wrapper.write_bytes(b"MZ stand-in")
    wrapper.chmod(0o755)  # Linux checks the execute bit; Windows has none to check
    digest = hashlib.sha256(wrapper.read_bytes()).hexdigest()
    return [{"name": "llama-server", "version": "b1", "path": str(wrapper), "sha256": digest}]


async def test_a_windows_agent_composes_the_process_driver_with_dpapi_sealed_keys(tmp_path: Path) -> None:
    """The composition of a Windows agent, played on Linux: ``win32`` given, DPAPI a stand-in.

    Before DPAPI there was no key protector on Windows, so no process driver: the node ran nothing.
    """
    dpapi = FakeDpapi()
    host = FakeProcessHost()
    chosen = settings(tmp_path, process={"enabled": True}, executables=_windows_workspace(tmp_path))
    windows_keys = partial(platform_key_protector, platform="win32", dpapi=lambda: dpapi)
    spec = ProcessLaunch(
        model_id="tiny",
        served_name="tiny",
        runtime="llamacpp",
        argv=["--model", "m/tiny.gguf"],
        model_path="m/tiny.gguf",
        budget_gib=1.0,
        config_hash="0123456789abcdef",
        executable=ExecutableRef(name="llama-server", version="b1"),
    )

    async with await compose_services(
        chosen, process_host=lambda: host, key_protector=windows_keys
    ) as services:
        [composed] = services.runtimes.drivers
        await services.runtimes.driver_for(spec).start(spec)
        [launched] = host.running()
    # A restarted agent (same machine, same account) reads the sealed key back for its proxy.
    async with await compose_services(chosen, process_host=lambda: host, key_protector=windows_keys) as again:
        _url, headers = await again.runtimes.upstream("tiny")

    key = launched.env["LLAMA_API_KEY"]
    sealed = (tmp_path / "state" / "keys" / "tiny.dpapi").read_bytes()
    assert isinstance(composed.driver, ProcessDriver)
    assert composed.runtimes == (
        ProcessRuntimeInfo(
            runtime="llamacpp", executables=[ExecutableRef(name="llama-server", version="b1")]
        ),
    )
    assert key.encode() not in sealed
    assert headers["Authorization"] == f"Bearer {key}"
    assert ("protect", b"mirbad instance key\x00tiny") in dpapi.calls
    assert ("unprotect", b"mirbad instance key\x00tiny") in dpapi.calls
    assert not (tmp_path / "state" / "keys" / "tiny.key").exists()


def test_the_platform_picks_the_key_protector(tmp_path: Path) -> None:
    chosen = settings(tmp_path)
    dpapi = FakeDpapi()

    windows = platform_key_protector(chosen, platform="win32", dpapi=lambda: dpapi)
    here = platform_key_protector(chosen)

    assert isinstance(windows, DpapiInstanceKeyProtector)
    assert windows.folder == tmp_path / "state" / "keys"
    assert isinstance(here, FileInstanceKeyProtector if os.name == "posix" else DpapiInstanceKeyProtector)
