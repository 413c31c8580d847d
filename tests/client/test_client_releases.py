"""The typed client's release calls, both twins, against a real master served on loopback."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests._support.asgi_server import serve_asgi
from tests._support.polling import eventually
from tests.client.test_client import client_of
from tests.master._stack import running_master
from tests.master.test_api_releases import BUILD, IMAGE, VLLM, agent

from mirbad_client import AdminApiError
from mirbad_master._app import create_master_app

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sync", "async"])
def kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


async def test_release_calls(tmp_path: Path, kind: str) -> None:
    async with (
        running_master(tmp_path, "local", "gpu-1", agent=agent) as master,
        serve_asgi(create_master_app(master.services, master.auth)) as url,
        client_of(kind, url, master.password) as admin,
    ):
        await eventually(lambda: all(s.info is not None for s in master.services.cache.nodes()), timeout_s=10)
        view = await admin("releases")
        node = await admin("node_releases", "local")
        job = await admin("start_image_pull", "local", IMAGE)
        one = await admin("image_pull", "local", job.id)
        cancelled = await admin("cancel_image_pull", "local", job.id)
        with pytest.raises(AdminApiError) as bad:
            await admin("start_image_pull", "local", "Not An Image")

    assert {agent.node_id: agent.skew is not None for agent in view.agents} == {"local": False, "gpu-1": True}
    assert (node.builds, node.images, node.can_pull) == ([BUILD], [VLLM], True)
    assert (one.image, one.state, cancelled.state) == (IMAGE, "running", "cancelled")
    assert (bad.value.status_code, bad.value.code, bad.value.field) == (
        422,
        "invalid_image_reference",
        "image",
    )
