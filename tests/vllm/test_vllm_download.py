"""A Hugging Face folder downloaded through the master from a loopback hub, then served by the real vLLM.

The tiny HF model of this tier (tests/_support/vllm_tiny_model.py) is published on a loopback hub; a
``mirbad up`` whose model root does not hold it downloads it with ``POST /api/nodes/local/downloads``
(every file checked by size, the safetensors by its sha256), and the real vLLM CPU image serves the
downloaded folder: one start, one chat completion. The hub runs in a blocking portal's event loop, so
the test itself stays synchronous like the rest of the tier.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest
from anyio.from_thread import start_blocking_portal
from tests._support.asgi_server import serve_asgi
from tests._support.mirbad_up import WAIT_S, Admin, Up
from tests._support.model_hub import TestHub
from tests._support.polling import until
from tests._support.vllm_image import ensure_model
from tests._support.vllm_up import vllm_up

pytestmark = [
    pytest.mark.long(minutes=1),
    pytest.mark.vllm,
    pytest.mark.docker,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="runs mirbad up's process tree"),
    pytest.mark.timeout(900),
]

REPO: Final = "mirbad/tiny-llama-hf"
FOLDER: Final = "tiny-llama-from-hub"
START_S: Final = 600.0
"""vLLM's start on two shared cores: ~35 s alone, several minutes while other tests load the CPUs."""


@pytest.fixture
def hub_url() -> Iterator[str]:
    """A loopback hub serving the tier's tiny HF model as :data:`REPO`."""
    model = ensure_model()
    hub = TestHub()
    hub.add_repo(REPO, {path.name: path.read_bytes() for path in sorted(model.iterdir()) if path.is_file()})
    with start_blocking_portal() as portal, portal.wrap_async_context_manager(serve_asgi(hub.app())) as url:
        yield url


@pytest.fixture
def up(tmp_path: Path, hub_url: str, run_id: str) -> Iterator[Up]:
    """``mirbad up`` with an empty model root, downloading from the hub, on a Docker network of its own."""
    with vllm_up(tmp_path, run_id, settings={"downloads": {"hf_endpoint": hub_url}}) as started:
        yield started


def test_a_folder_downloaded_from_the_hub_is_served_by_the_real_vllm(up: Up, run_id: str) -> None:
    admin = Admin(up.base_url, up.first_run_password(up.start()))
    try:
        request = {"kind": "huggingface", "repoId": REPO, "folder": FOLDER}
        job = admin.ok("POST", "/api/nodes/local/downloads", json=request)
        done = _finished(admin, job["id"])
        model_id = f"hub-{run_id}"
        model: dict[str, Any] = {
            "id": model_id,
            "servedName": "tiny-from-hub",
            "image": up.env["MIRBAD_TEST_IMAGE"],
            "modelPath": FOLDER,
            "maxModelLen": 256,
            "maxNumSeqs": 2,
            "memoryBudgetGiB": 4,
            "extraArgs": ["--dtype", "bfloat16", "--enforce-eager"],
        }
        admin.ok("POST", "/api/models", json=model)
        admin.ok("POST", f"/api/models/{model_id}/start")
        _ready(admin, up, model_id)
        chat = admin.http.post(
            "/v1/chat/completions",
            json={
                "model": "tiny-from-hub",
                "messages": [{"role": "user", "content": "hello"}],
                "max_tokens": 4,
                "ignore_eos": True,
            },
        )
        admin.ok("POST", f"/api/models/{model_id}/stop")
    finally:
        admin.close()

    assert (done.get("state"), done.get("error")) == ("completed", None)
    assert done["doneBytes"] == done["totalBytes"]
    assert sorted(path.name for path in (up.data_dir / "models" / FOLDER).iterdir()) == sorted(
        path.name for path in ensure_model().iterdir() if path.is_file()
    )
    assert chat.status_code == 200, chat.text
    assert chat.json()["usage"]["completion_tokens"] == 4


def _finished(admin: Admin, download_id: str) -> dict[str, Any]:
    seen: list[dict[str, Any]] = []

    def stopped() -> bool:
        seen.append(admin.ok("GET", f"/api/nodes/local/downloads/{download_id}"))
        # Fields at their defaults are left out of the wire (a queued job has no "state").
        return seen[-1].get("state") in ("completed", "failed", "cancelled")

    until(stopped, lambda: f"the download never finished: {seen[-1:]}", timeout_s=WAIT_S)
    return seen[-1]


def _ready(admin: Admin, up: Up, model_id: str) -> None:
    seen: list[dict[str, Any]] = []

    def ready() -> bool:
        seen.append(admin.view(model_id)["status"])
        assert seen[-1]["state"] != "Failed", seen[-1]
        return bool(seen[-1]["state"] == "Ready")

    until(ready, lambda: f"{model_id} never became Ready: {seen[-1:]}\n{up.log()}", timeout_s=START_S)
