"""A standalone agent whose settings name no llama-server catalogues the one found on PATH (issue 8)."""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import Any

import pytest
from tests._support.agent_settings import agent_settings

from mirbad_agent import AgentSettings, compose_services, find_llama_server
from mirbad_agent.exceptions import AgentConfigError
from mirbad_protocol import ExecutableRef
from mirbad_protocol.agent import ProcessRuntimeInfo

pytestmark = pytest.mark.anyio


def stand_in(folder: Path, name: str = "llama-server") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(b"#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


def no_bundle() -> tuple[Path, str] | None:
    return None


def test_one_on_the_search_path_is_found_with_an_unknown_version(tmp_path: Path) -> None:
    found = stand_in(tmp_path / "bin")
    search = os.pathsep.join([str(tmp_path / "empty"), str(found.parent)])
    assert find_llama_server(search, bundled=no_bundle) == (found, "local")


def test_without_one_on_path_the_bundled_binary_is_used_with_its_build(tmp_path: Path) -> None:
    bundled = stand_in(tmp_path / "pkg")
    assert find_llama_server(str(tmp_path / "empty"), bundled=lambda: (bundled, "6000")) == (bundled, "6000")
    assert find_llama_server(str(bundled.parent), bundled=lambda: (bundled, "6000")) == (bundled, "6000")


def test_a_configured_one_wins_over_path_and_bundle_with_the_bundles_build_when_it_is_that_file(
    tmp_path: Path,
) -> None:
    on_path = stand_in(tmp_path / "bin")
    configured = stand_in(tmp_path / "opt")
    bundled = stand_in(tmp_path / "pkg")

    def package() -> tuple[Path, str]:
        return bundled, "6000"

    search = str(on_path.parent)
    assert find_llama_server(search, configured=configured, bundled=package) == (configured, "local")
    assert find_llama_server(search, configured=bundled, bundled=package) == (bundled, "6000")


def test_none_anywhere_is_none(tmp_path: Path) -> None:
    assert find_llama_server(str(tmp_path), bundled=no_bundle) is None


def settings(tmp_path: Path, **values: Any) -> AgentSettings:
    # The process driver with llamacpp on: what finding a llama-server is for.
    process = {"enabled": True, "runtimes": ["llamacpp"]}
    return agent_settings(tmp_path, **{"process": process, **values})


@pytest.mark.skipif(os.name != "posix", reason="the POSIX process host and key protector")
async def test_the_agent_catalogues_the_found_one_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    found = stand_in(tmp_path / "bin")
    caplog.set_level(logging.INFO)

    async with await compose_services(settings(tmp_path), llama_server=lambda: (found, "local")) as services:
        [composed] = services.runtimes.drivers

    assert composed.runtimes == (
        ProcessRuntimeInfo(
            runtime="llamacpp", executables=[ExecutableRef(name="llama-server", version="local")]
        ),
    )
    assert services.catalog is not None
    [entry] = services.catalog.entries
    assert (entry.path, entry.sha256) == (found, hashlib.sha256(found.read_bytes()).hexdigest())
    [line] = [record.getMessage() for record in caplog.records if "llama-server" in record.getMessage()]
    assert f"catalogues {found} as llama-server local" in line
    assert "mirbad-agent executables add" in line


@pytest.mark.skipif(os.name != "posix", reason="the POSIX process host and key protector")
async def test_the_llama_server_setting_is_catalogued_by_the_default_finder(tmp_path: Path) -> None:
    # What `mirbad up --llama-server PATH` writes into its local agent's settings.
    configured = stand_in(tmp_path / "opt")
    async with await compose_services(settings(tmp_path, llama_server=str(configured))) as services:
        assert services.catalog is not None
        [entry] = services.catalog.entries
    assert (entry.path, entry.version) == (configured, "local")
    assert entry.sha256 == hashlib.sha256(configured.read_bytes()).hexdigest()


@pytest.mark.skipif(os.name != "posix", reason="the POSIX process host and key protector")
async def test_a_configured_llama_server_that_is_not_a_file_is_a_settings_error(tmp_path: Path) -> None:
    chosen = settings(tmp_path, llama_server=str(tmp_path / "missing"))
    with pytest.raises(AgentConfigError, match=r"llama_server: .*missing is not a file"):
        await compose_services(chosen)


@pytest.mark.skipif(os.name != "posix", reason="the POSIX process host and key protector")
async def test_a_configured_llama_server_is_kept_and_nothing_is_looked_for(tmp_path: Path) -> None:
    configured = stand_in(tmp_path / "opt")
    entry = {"name": "llama-server", "version": "b1", "path": str(configured), "sha256": "0" * 64}

    def must_not_look() -> tuple[Path, str] | None:
        raise AssertionError("the settings name a llama-server")

    chosen = settings(tmp_path, executables=[entry])
    async with await compose_services(chosen, llama_server=must_not_look) as services:
        assert services.catalog is not None
        assert [item.version for item in services.catalog.entries] == ["b1"]


@pytest.mark.skipif(os.name != "posix", reason="the POSIX process host and key protector")
async def test_a_node_without_the_process_driver_looks_for_nothing(tmp_path: Path) -> None:
    def must_not_look() -> tuple[Path, str] | None:
        raise AssertionError("no process driver, no llama-server")

    chosen = settings(tmp_path, process={"enabled": False})
    async with await compose_services(chosen, llama_server=must_not_look) as services:
        assert services.catalog is None
