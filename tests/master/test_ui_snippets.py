"""The Access page's snippets, run: a model that is not Ready fails them at once with the router's reason."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from tests._support.asgi_server import serve_asgi

from mirbad_master.keys._snippets import JAVASCRIPT_FILE_NAME, snippets

NOT_READY = "The model 'tiny' is not ready (state Stopped); retry later."
RUN_TIMEOUT_S = 30.0


def _not_ready_router(seen: list[str]) -> Starlette:
    """What the router answers for a Stopped model: a 503 in the OpenAI shape with ``Retry-After: 30``."""

    async def chat(request: Request) -> JSONResponse:
        seen.append(request.headers.get("authorization", ""))
        error = {"message": NOT_READY, "type": "server_error", "param": None, "code": "model_not_ready"}
        return JSONResponse({"error": error}, status_code=503, headers={"Retry-After": "30"})

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


@pytest.mark.anyio
async def test_the_python_snippet_reports_a_refusal_at_once_without_retrying(tmp_path: Path) -> None:
    seen: list[str] = []
    async with serve_asgi(_not_ready_router(seen)) as url:
        script = tmp_path / "snippet.py"
        script.write_text(snippets(f"{url}/v1", "tiny")["python"])
        with anyio.fail_after(RUN_TIMEOUT_S):
            done = await anyio.run_process(
                [sys.executable, str(script)], env={"MIRBAD_API_KEY": "mb-test"}, check=False
            )

    assert done.returncode == 1
    assert done.stderr.decode().strip() == f"refused (503): {NOT_READY}"
    assert seen == ["Bearer mb-test"]  # once: the client's retries would wait out Retry-After twice


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_the_javascript_snippet_is_a_valid_module(tmp_path: Path) -> None:
    script = tmp_path / "snippet.mjs"
    script.write_text(snippets("http://127.0.0.1:8080/v1", "tiny")["javascript"])
    checked = subprocess.run(
        ["node", "--check", str(script)], capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False
    )
    assert checked.returncode == 0, checked.stderr


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_the_javascript_snippet_runs_as_an_es_module_under_the_name_it_gives(tmp_path: Path) -> None:
    # A CommonJS package around it, as a newcomer's project often is: a .js file with import and top-level
    # await is a syntax error there; the name the snippet tells the user to save it as must still work.
    (tmp_path / "package.json").write_text('{"type": "commonjs"}')
    shown = snippets("http://127.0.0.1:8080/v1", "tiny")["javascript"]
    assert JAVASCRIPT_FILE_NAME.endswith(".mjs")
    assert JAVASCRIPT_FILE_NAME in shown.splitlines()[0]
    script = tmp_path / JAVASCRIPT_FILE_NAME
    script.write_text(shown)
    checked = subprocess.run(
        ["node", "--check", str(script)], capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False
    )
    assert checked.returncode == 0, checked.stderr
