"""The releases API over a real master composition and fake agents: versions and skew, builds, images, pulls.

``local`` is an agent of the master's own major.minor with a llama-server, an image and pull routes;
``gpu-1`` an agent of another minor version without Docker (no ``images.pull``) and too old to report
its builds. The agent's own refusals must come out of the master with their code and field.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from tests._support.polling import eventually
from tests.master._stack import Master, running_master
from tests.orchestration._fake_agent import FakeAgent, Refusal

from mirbad_master.releases.actions import changelog_text, master_version, version_skew
from mirbad_protocol.agent import AgentErrorCode, AgentInfo, ContainerRuntimeInfo
from mirbad_protocol.releases import (
    ImageInfo,
    ImageList,
    ImagePull,
    ImagePullList,
    LlamaServerBinary,
    LlamaServerBuildList,
)

pytestmark = pytest.mark.anyio
IMAGE = "127.0.0.1:5000/mirbad-vllm:v1"
BUILD = LlamaServerBinary(
    name="llama-server",
    version="b6123",
    path="/opt/llama/llama-server",
    sha256="ab" * 32,
    reported="6123 (a1b2c3d)",
    built_with="built with cc for x86_64-linux-gnu",
)
VLLM = ImageInfo(
    id="sha256:" + "1" * 64,
    tags=["vllm/vllm-openai:v0.8.5"],
    size_bytes=9 * 1024**3,
    created=datetime(2026, 5, 1, tzinfo=UTC),
)


@dataclass
class ReleasesAgent(FakeAgent):
    """The fake agent with the release routes and a version of its own."""

    version: str = "0.1.0"
    features: list[str] = field(default_factory=list)
    builds: list[LlamaServerBinary] = field(default_factory=list)
    images: list[ImageInfo] = field(default_factory=list)
    pulls: dict[str, ImagePull] = field(default_factory=dict)

    def _table(self) -> list[tuple[str, str, str, Any]]:
        return [
            *super()._table(),
            ("builds", "GET", "/releases/llama-server", self._builds),
            ("images", "GET", "/images", self._images),
            ("pulls", "GET", "/images/pulls", self._pulls),
            ("pull_start", "POST", "/images/pulls", self._pull_start),
            ("pull", "GET", "/images/pulls/{pull_id}", self._pull),
            ("pull_cancel", "POST", "/images/pulls/{pull_id}/cancel", self._pull_cancel),
        ]

    async def _runtimes(self, request: Request) -> Response:
        info = AgentInfo(
            node_name=self.node_name,
            version=self.version,
            runtimes=[ContainerRuntimeInfo(runtime="vllm", network="mirbad")],
            features=["runtime.vllm.container", *self.features],
        )
        return JSONResponse(info.to_wire())

    async def _builds(self, request: Request) -> Response:
        return JSONResponse(LlamaServerBuildList(builds=self.builds).to_wire())

    async def _images(self, request: Request) -> Response:
        return JSONResponse(ImageList(images=self.images).to_wire())

    async def _pulls(self, request: Request) -> Response:
        return JSONResponse(ImagePullList(pulls=list(self.pulls.values())).to_wire())

    async def _pull_start(self, request: Request) -> Response:
        job = ImagePull(
            id=f"pull-{len(self.pulls)}",
            image=(await request.json())["image"],
            state="running",
            started_at=_NOW,
        )
        self.pulls[job.id] = job
        return JSONResponse(job.to_wire(), status_code=202)

    async def _pull(self, request: Request) -> Response:
        return JSONResponse(self.pulls[request.path_params["pull_id"]].to_wire())

    async def _pull_cancel(self, request: Request) -> Response:
        pull_id = request.path_params["pull_id"]
        self.pulls[pull_id] = self.pulls[pull_id].model_copy(update={"state": "cancelled"})
        return JSONResponse(self.pulls[pull_id].to_wire())


_NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def agent(node_id: str) -> ReleasesAgent:
    if node_id == "local":
        return ReleasesAgent(
            node_name=node_id,
            version=master_version(),
            features=["releases.llama-server", "images.pull"],
            builds=[BUILD],
            images=[VLLM],
        )
    return ReleasesAgent(node_name=node_id, version="0.99.0")


@pytest.fixture
async def master(tmp_path: Path) -> AsyncIterator[Master]:
    async with running_master(tmp_path, "local", "gpu-1", agent=agent) as master:
        await eventually(lambda: all(s.info is not None for s in master.services.cache.nodes()), timeout_s=10)
        yield master


def audit_text(master: Master) -> str:
    return "".join(p.read_text() for p in (master.services.settings.data_dir / "audit").glob("*"))


async def test_the_versions_of_the_master_and_every_agent_with_the_skew_warning(master: Master) -> None:
    view = (await master.admin.get("/api/releases")).json()
    assert view["masterVersion"] == master_version()
    assert view["skewRule"] == "an agent whose major.minor version differs from the master's gets a warning"
    agents = {entry["nodeId"]: entry for entry in view["agents"]}
    assert agents["local"] == {"nodeId": "local", "version": master_version(), "reachable": True}
    assert agents["gpu-1"]["version"] == "0.99.0"
    assert agents["gpu-1"]["skew"] == (
        f"agent 0.99.0 differs from master {master_version()} in major.minor: upgrade the older one"
    )


async def test_a_nodes_builds_images_and_pulls_come_from_its_agent(master: Master) -> None:
    local = (await master.admin.get("/api/nodes/local/releases")).json()
    other = (await master.admin.get("/api/nodes/gpu-1/releases")).json()
    assert local == {
        "nodeId": "local",
        "builds": [BUILD.to_wire()],
        "images": [VLLM.to_wire()],
        "canPull": True,
    }
    assert other == {
        "nodeId": "gpu-1",
        "problems": ["its agent is too old to report its llama-server builds"],
    }
    assert (await master.admin.get("/api/nodes/nowhere/releases")).status_code == 404


async def test_a_pull_starts_shows_and_cancels_through_the_agent_and_is_audited(master: Master) -> None:
    started = await master.admin.post("/api/nodes/local/image-pulls", json={"image": IMAGE})
    assert started.status_code == 202, started.text
    pull_id = started.json()["id"]
    one = await master.admin.get(f"/api/nodes/local/image-pulls/{pull_id}")
    cancelled = await master.admin.delete(f"/api/nodes/local/image-pulls/{pull_id}")
    assert (one.json()["image"], one.json()["state"]) == (IMAGE, "running")
    assert cancelled.json()["state"] == "cancelled"
    assert master.agents.agents["local"].bodies[-1] == {"image": IMAGE}
    audit = audit_text(master)
    assert "image.pull" in audit
    assert IMAGE in audit
    assert "image.pull.cancel" in audit


@pytest.mark.parametrize(
    ("node", "body", "expected"),
    [
        ("local", {"image": "vllm/Upper:case"}, (422, "invalid_image_reference", "image")),
        ("local", {"image": "vllm/x:bad tag"}, (422, "invalid_image_reference", "image")),
        ("local", {"image": 7}, (400, "invalid_request", "image")),
        ("local", {"image": IMAGE, "tag": "v2"}, (400, "invalid_request", "tag")),
        ("local", {}, (400, "invalid_request", "image")),
        ("gpu-1", {"image": IMAGE}, (409, "feature_missing", "image")),
    ],
)
async def test_bad_pull_requests_are_refused_naming_the_field(
    master: Master, node: str, body: dict[str, Any], expected: tuple[int, str, str]
) -> None:
    answer = await master.admin.post(f"/api/nodes/{node}/image-pulls", json=body)
    error = answer.json()["error"]
    assert (answer.status_code, error["code"], error.get("field")) == expected
    assert not any(
        path.startswith("/agent/v1/images/pulls") for _, path in master.agents.agents[node].requests
    )


async def test_the_agents_refusals_keep_their_codes(master: Master) -> None:
    local = master.agents.agents["local"]
    local.refusals["pull_start"] = Refusal(
        409, AgentErrorCode.PULL_CONFLICT, "a pull of x is running already"
    )
    conflict = await master.admin.post("/api/nodes/local/image-pulls", json={"image": IMAGE})
    local.refusals["pull"] = Refusal(404, AgentErrorCode.PULL_NOT_FOUND, "no image pull 'pull-9'")
    missing = await master.admin.get("/api/nodes/local/image-pulls/pull-9")
    assert (conflict.status_code, conflict.json()["error"]["code"]) == (409, "pull_conflict")
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "pull_not_found")


async def test_the_changelog_is_served_as_markdown(master: Master) -> None:
    answer = await master.admin.get("/api/releases/changelog")
    assert answer.headers["content-type"].startswith("text/markdown")
    assert answer.text == changelog_text()
    assert answer.text.startswith("# Changelog")


_VERSION = st.tuples(st.integers(0, 99), st.integers(0, 99), st.integers(0, 999))


@given(master=_VERSION, agent=_VERSION, suffix=st.sampled_from(["", "-test", "+local", ".dev3", "rc1"]))
def test_skew_is_warned_exactly_when_major_minor_differ(
    master: tuple[int, int, int], agent: tuple[int, int, int], suffix: str
) -> None:
    ours, theirs = ".".join(map(str, master)), ".".join(map(str, agent)) + suffix
    assert (version_skew(ours, theirs) is None) == (master[:2] == agent[:2])


def test_a_version_that_is_not_major_minor_cannot_be_compared() -> None:
    assert (
        version_skew("0.1.0", "local")
        == "cannot compare agent local with master 0.1.0: not major.minor versions"
    )
