"""The typed client's download calls, both twins, against a real master served on loopback."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests._support.asgi_server import serve_asgi
from tests.client.test_client import client_of
from tests.master._stack import running_master
from tests.master.test_api_downloads import TOKEN, agent

from mirbad_client import AdminApiError
from mirbad_master._app import create_master_app
from mirbad_protocol.downloads import HuggingFaceDownload, OllamaDownload

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sync", "async"])
def kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


async def test_download_calls(tmp_path: Path, kind: str) -> None:
    hf = HuggingFaceDownload(repo_id="Qwen/Qwen3-0.6B-GGUF", folder="qwen3", token=TOKEN)
    async with (
        running_master(tmp_path, "local", "gpu-1", agent=agent) as master,
        serve_asgi(create_master_app(master.services, master.auth)) as url,
        client_of(kind, url, master.password) as admin,
    ):
        job = await admin("start_download", "local", hf)
        listed = await admin("downloads", "local")
        one = await admin("download", "local", job.id)
        cancelled = await admin("cancel_download", "local", job.id)
        retried = await admin("retry_download", "local", job.id)
        await admin("cancel_download", "local", job.id)
        await admin("remove_download", "local", job.id)
        after = await admin("downloads", "local")
        with pytest.raises(AdminApiError) as missing:
            await admin("start_download", "gpu-1", OllamaDownload(model="qwen3", folder="q"))

    assert (job.source, job.state) == ("Qwen/Qwen3-0.6B-GGUF@main", "running")
    assert [d.id for d in listed] == [job.id]
    assert one.folder == "qwen3"
    assert cancelled.state == "cancelled"
    assert (retried.id, retried.state) == (job.id, "queued")
    assert after == []
    assert (missing.value.status_code, missing.value.code) == (409, "feature_missing")
    assert missing.value.node_id == "gpu-1"
