"""``mirbad demo``: the first model on a machine with no network (no Hugging Face hub).

It writes the tiny demo GGUF under the local agent's first model root and, given the administrator
password, defines it on the running ``mirbad up`` through ``/api`` (the executable the local node
offers, so the start works whichever llama-server it found). Without a password it writes the file
and prints the one command that defines it.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, NoReturn

import httpx

from ._data_dir import INITIAL_PASSWORD_FILE
from ._demo_model import DEMO_MODEL_ID, TINY_MODEL_PATH, demo_definition, write_tiny_gguf
from ._settings import load_master_settings

__all__ = ["add_demo", "run_demo"]

_TIMEOUT_S: Final = 30.0
_LOCAL_NODE: Final = "local"


def add_demo(commands: Any, add_data_dir: Callable[[argparse.ArgumentParser], None]) -> None:
    """Add ``mirbad demo`` to the command line's subcommands."""
    demo = commands.add_parser(
        "demo",
        help="write the tiny demo chat model and define it (works with no network)",
        description=f"Write the tiny demo GGUF ({TINY_MODEL_PATH}, about 0.6 MB, random weights) under "
        f"the local agent's model root and define it as '{DEMO_MODEL_ID}' on the running mirbad up.",
    )
    add_data_dir(demo)
    demo.add_argument("--model-root", type=Path, help="the model folder (default {data dir}/models)")
    demo.add_argument("--url", help="the master (default http://127.0.0.1:PORT; MIRBAD_PORT)")
    demo.add_argument(
        "--password-file",
        type=Path,
        help="the administrator password (its first line; '-' reads stdin); default: the first run's "
        f"{{data dir}}/{INITIAL_PASSWORD_FILE} when it exists, else the model is only written",
    )


def run_demo(
    ns: argparse.Namespace,
    read_password: Callable[[Path], str],
    fail: Callable[[str], NoReturn],
) -> int:
    """Write the demo model and define it; 0 when done, 1 when the master refused or did not answer."""
    flags = {"data_dir": ns.data_dir, "model_roots": [ns.model_root] if ns.model_root else None}
    settings = load_master_settings(os.environ, flags)
    path = settings.agent_models[0] / TINY_MODEL_PATH
    if path.is_file():
        print(f"demo model already there: {path}")
    else:
        write_tiny_gguf(path)
        print(f"wrote the demo model: {path}")
    password = _password(ns.password_file, settings.data_dir, read_password)
    url = (ns.url or f"http://127.0.0.1:{settings.port}").rstrip("/")
    if password is None:
        print(
            "define it with the administrator password (or run mirbad demo --password-file -):\n"
            f'  curl -H "Authorization: Bearer $PW" -X POST {url}/api/models -d @examples/llamacpp-tiny.json '
            "-H 'content-type: application/json'"
        )
        return 0
    if not url.startswith(("http://", "https://")):
        fail(f"--url: expected http://HOST:PORT, got {url!r}")
    try:
        return _define(url, password)
    except httpx.HTTPError as exc:
        print(f"mirbad: error: cannot reach the master at {url} ({exc}); is mirbad up running?")
        return 1


def _password(given: Path | None, data_dir: Path, read_password: Callable[[Path], str]) -> str | None:
    if given is not None:
        return read_password(given)
    first_run = data_dir / INITIAL_PASSWORD_FILE
    return read_password(first_run) if first_run.is_file() else None


def _define(url: str, password: str) -> int:
    headers = {"Authorization": f"Bearer {password}"}
    with httpx.Client(base_url=url, headers=headers, timeout=_TIMEOUT_S, trust_env=False) as api:
        definition = demo_definition()
        executable = _local_llama_server(api)
        if executable is not None:
            # The version the local node offers: "11434" for dev.py's build, "local" for one on PATH.
            definition["executable"] = executable
        answer = api.post("/api/models", json=definition)
        if answer.status_code == httpx.codes.CREATED:
            print(f"defined '{DEMO_MODEL_ID}'")
        elif _code(answer) == "model_exists":
            print(f"'{DEMO_MODEL_ID}' is already defined")
        else:
            print(f"mirbad: error: the master refused the definition: {answer.status_code} {answer.text}")
            return 1
    print(
        "start it and chat:\n"
        f'  curl -H "Authorization: Bearer $PW" -X POST {url}/api/models/{DEMO_MODEL_ID}/start\n'
        f"  curl {url}/v1/chat/completions -H 'content-type: application/json' "
        f'-d \'{{"model": "{DEMO_MODEL_ID}", "messages": [{{"role": "user", "content": "hello"}}]}}\''
    )
    return 0


def _local_llama_server(api: httpx.Client) -> dict[str, Any] | None:
    """The first llama-server the local node catalogues, or None (still building, or no such node)."""
    answer = api.get(f"/api/nodes/{_LOCAL_NODE}")
    if not answer.is_success:
        return None
    runtimes = (answer.json().get("info") or {}).get("runtimes") or []
    for runtime in runtimes:
        if runtime.get("runtime") == "llamacpp" and runtime.get("executables"):
            executable: dict[str, Any] = runtime["executables"][0]
            return executable
    return None


def _code(answer: httpx.Response) -> str | None:
    try:
        code = answer.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None
    return code if isinstance(code, str) else None
