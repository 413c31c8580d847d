"""The LiteLLM proxy beside ours: installed on demand in its own virtualenv, pointed at the same upstream.

The virtualenv lives under the user's cache (``$XDG_CACHE_HOME/mirbad-bench/litellm-venv``, else
``~/.cache/...``), made with ``python -m venv`` and ``pip install 'litellm[proxy]'`` (the latest
release), never in the project's environment. It is configured as LiteLLM's production guide
advises for speed: no database, no callbacks, spend and error logs off, one worker, logs at ERROR,
a master key (it refuses to start in production mode without one) that every request presents. When
it cannot be installed or does not start, :func:`running_litellm` yields the reason instead and the
bench goes on.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import httpx

__all__ = ["LiteLlm", "litellm_venv", "running_litellm"]

_INSTALL_TIMEOUT_S: Final = 900.0
_START_TIMEOUT_S: Final = 180.0
_STOP_TIMEOUT_S: Final = 15.0


@dataclass(frozen=True)
class LiteLlm:
    """A running LiteLLM proxy: its pid and the URL of its chat completions; or why there is none."""

    pid: int | None
    url: str
    version: str
    skipped: str | None = None
    master_key: str = ""


def litellm_venv() -> Path:
    """Where LiteLLM's virtualenv is kept between runs."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "mirbad-bench" / "litellm-venv"


@contextlib.contextmanager
def running_litellm(work_dir: Path, upstream_port: int, upstream_key: str) -> Iterator[LiteLlm]:
    """Install (once) and start LiteLLM's proxy in front of the upstream; stop it on exit."""
    venv = litellm_venv()
    problem = _ensure_installed(venv)
    if problem is not None:
        print(f"litellm skipped: {problem}", flush=True)
        yield LiteLlm(None, "", "", problem)
        return
    port = _free_port()
    # LiteLLM refuses to start in production mode without a master key; clients present it.
    master_key = "sk-" + secrets.token_hex(32)
    config = _write_config(work_dir, upstream_port, upstream_key, master_key)
    log = (work_dir / "litellm.log").open("ab")
    environment = {**os.environ, "LITELLM_LOG": "ERROR", "LITELLM_MODE": "PRODUCTION"}
    environment["LITELLM_MASTER_KEY"] = master_key  # its boot check reads it here too
    environment.pop("DATABASE_URL", None)
    command = [str(venv / "bin" / "litellm"), "--config", str(config), "--host", "127.0.0.1"]
    command += ["--port", str(port), "--num_workers", "1"]
    process = subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=environment
    )
    try:
        problem = _wait_ready(process, port, work_dir / "litellm.log")
        if problem is not None:
            print(f"litellm skipped: {problem}", flush=True)
            yield LiteLlm(None, "", "", problem)
        else:
            url = f"http://127.0.0.1:{port}/v1/chat/completions"
            yield LiteLlm(process.pid, url, _version(venv), master_key=master_key)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(_STOP_TIMEOUT_S)
        log.close()


def _ensure_installed(venv: Path) -> str | None:
    if (venv / "bin" / "litellm").exists():
        return None
    print(f"installing LiteLLM into {venv} (once; minutes)", flush=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    steps = [
        [sys.executable, "-m", "venv", str(venv)],
        [str(venv / "bin" / "pip"), "install", "--quiet", "litellm[proxy]"],
    ]
    for step in steps:
        try:
            result = subprocess.run(
                step, capture_output=True, text=True, timeout=_INSTALL_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"{' '.join(step[:3])} failed: {error}"
        if result.returncode != 0:
            return f"{' '.join(step[:3])} exited with {result.returncode}: {result.stderr.strip()[-300:]}"
    return None


def _write_config(work_dir: Path, upstream_port: int, upstream_key: str, master_key: str) -> Path:
    # YAML is a superset of JSON: no YAML writer needed on our side.
    config = {
        "model_list": [
            {
                "model_name": "bench",
                "litellm_params": {
                    "model": "openai/bench",
                    "api_base": f"http://127.0.0.1:{upstream_port}/v1",
                    "api_key": upstream_key,
                },
            }
        ],
        "litellm_settings": {
            "set_verbose": False,
            "json_logs": True,
            "request_timeout": 600,
            "callbacks": [],
        },
        "general_settings": {
            "master_key": master_key,
            "disable_spend_logs": True,
            "disable_error_logs": True,
            "proxy_batch_write_at": 60,
        },
    }
    path = work_dir / "litellm-config.yaml"
    path.write_text(json.dumps(config, indent=2))
    return path


def _wait_ready(process: subprocess.Popen[bytes], port: int, log: Path) -> str | None:
    deadline = time.monotonic() + _START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log.read_text(errors="replace").strip()[-400:]
            return f"the proxy exited with {process.returncode}: {tail}"
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/health/liveliness", timeout=2, trust_env=False).is_success:
                return None
        time.sleep(0.5)
    return f"the proxy did not answer within {_START_TIMEOUT_S:g} s"


def _version(venv: Path) -> str:
    found = sorted((venv / "lib").glob("python*/site-packages/litellm-*.dist-info"))
    return found[-1].name.removeprefix("litellm-").removesuffix(".dist-info") if found else "?"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
