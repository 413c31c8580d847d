"""docs/notebook.md, executed: its python blocks run in order, as notebook cells, against ``mirbad up``.

The cells share one namespace, read ``MIRBAD_URL`` and ``MIRBAD_PASSWORD`` from the environment as the
page tells its readers to, and may ``await`` at the top level (as in Jupyter). ``mirbad up`` runs as a
child process with this machine's llama-server and the tiny test GGUF under its model root.
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import pytest
from tests._support.asgi_server import free_port
from tests._support.mirbad_up import Up, mirbad_up, port_block
from tests._support.real_parts import llama_server_path
from tests._support.tiny_gguf import TINY_MODEL_PATH

from mirbad_client import MirbadClient
from mirbad_protocol import ModelState

DOC = Path(__file__).resolve().parents[2] / "docs" / "notebook.md"
_CELL = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def cells() -> list[str]:
    """The page's python blocks, in order."""
    return _CELL.findall(DOC.read_text(encoding="utf-8"))


def compiled(index: int, source: str) -> Any:
    return compile(source, f"docs/notebook.md, cell {index}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


def run_cell(code: Any, namespace: dict[str, Any]) -> None:
    """Run one cell; a cell that awaits runs in its own event loop, as a notebook kernel would."""
    if code.co_flags & inspect.CO_COROUTINE:

        async def awaited() -> None:
            await eval(code, namespace)

        # Its own thread, as a kernel runs its loop apart from the cell's code; it also keeps the cell
        # clear of any loop state an earlier test left on this worker's thread.
        with ThreadPoolExecutor(max_workers=1) as pool:
            pool.submit(anyio.run, awaited).result(timeout=120)
    else:
        exec(code, namespace)


def test_every_cell_compiles_and_uses_the_test_model() -> None:
    sources = cells()

    assert len(sources) >= 8
    for index, source in enumerate(sources, 1):
        compiled(index, source)
    assert f'model_path="{TINY_MODEL_PATH}"' in DOC.read_text(encoding="utf-8")


@pytest.fixture
def up(tmp_path: Path) -> Iterator[Up]:
    server = llama_server_path()
    assert server is not None
    first = port_block()
    process = {"port_range_start": first, "port_range_end": first + 19, "stop_timeout_s": 5}
    with mirbad_up(tmp_path, {"graceful_shutdown_s": 2, "process": process}, llama_server=server) as started:
        yield started


@pytest.mark.llamacpp
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="cleans up through /proc")
@pytest.mark.timeout(300)
def test_the_notebook_runs_against_mirbad_up(
    up: Up, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    banner = up.start()
    password = up.first_run_password(banner)
    monkeypatch.setenv("MIRBAD_URL", up.base_url)
    monkeypatch.setenv("MIRBAD_PASSWORD", password)
    # A fleet of two: the page must work beside a node it does not use (one whose agent never answers).
    with MirbadClient(up.base_url, password) as admin:
        admin.add_node("gpu-2", f"https://127.0.0.1:{free_port()}")
    namespace: dict[str, Any] = {"__name__": "__notebook__"}

    for index, source in enumerate(cells(), 1):
        try:
            run_cell(compiled(index, source), namespace)
        except Exception as exc:
            pytest.fail(f"cell {index} raised {exc!r}:\n{source}\nmirbad up's log:\n{up.log()}")
    printed = capsys.readouterr().out

    assert namespace["ready"].status.state is ModelState.READY
    assert isinstance(namespace["answer"].choices[0].message.content, str)
    assert "tiny-chat 1 requests," in printed
    assert "local reachable" in printed
    assert "gpu-2 unreachable" in printed
    assert namespace["view"].definition.placement.node_id == "local"
    assert "'tiny': <ModelState.READY: 'Ready'>" in printed
    assert up.interrupt() == 0
