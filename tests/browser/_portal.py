"""Steps the browser tests share: signing in, a Ready model, reading what a page shows."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Final

from tests._support.tiny_gguf import TINY_MODEL_PATH

if TYPE_CHECKING:
    from playwright.sync_api import Page
    from tests.browser.conftest import RunningMaster

READY_MODEL: Final = "tiny"
"""The model :func:`ensure_ready` starts through the admin API."""
READY_TIMEOUT_S: Final = 60.0


def local_llama_server(master: RunningMaster) -> dict[str, str]:
    """The llama-server the local node catalogues (name and version), as its agent reports it."""
    with master.api() as api:
        info = api.get("/nodes/local").json()["info"]
    for runtime in info["runtimes"]:
        if runtime.get("runtime") == "llamacpp" and runtime.get("executables"):
            executable: dict[str, str] = runtime["executables"][0]
            return {"name": executable["name"], "version": executable["version"]}
    raise AssertionError(f"the local node offers no llama-server: {info}")


def tiny_definition(master: RunningMaster, model_id: str, **changes: object) -> dict[str, object]:
    """The tiny GGUF served by the local llama-server, as the admin API takes it."""
    return {
        "id": model_id,
        "servedName": model_id,
        "runtime": "llamacpp",
        "executable": local_llama_server(master),
        "modelPath": TINY_MODEL_PATH,
        "maxModelLen": 256,
        "maxNumSeqs": 2,
        "memoryBudgetGiB": 0.5,
        **changes,
    }


def ensure_ready(master: RunningMaster, model_id: str = READY_MODEL, **changes: object) -> str:
    """Register (if needed) and start ``model_id`` through ``/api``; wait until it is Ready."""
    with master.api() as api:
        if api.get(f"/models/{model_id}").status_code == 404:
            api.post("/models", json=tiny_definition(master, model_id, **changes)).raise_for_status()
        api.post(f"/models/{model_id}/start").raise_for_status()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            status = api.get(f"/models/{model_id}").json()["status"]
            if status["state"] == "Ready":
                return model_id
            assert status["state"] in ("Starting", "Stopped"), status
            time.sleep(0.2)
    raise AssertionError(f"{model_id} did not become Ready within {READY_TIMEOUT_S} s")


def sign_in(page: Page, master: RunningMaster, path: str = "/") -> None:
    """Sign in through the login page, landing on ``path``."""
    page.goto(f"{master.url}{path}")
    page.get_by_test_id("password").fill(master.password)
    page.get_by_test_id("sign-in").click()
    page.wait_for_url(f"{master.url}{path}")
