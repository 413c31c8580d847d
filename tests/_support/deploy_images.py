"""The deploy tier's container images, built for real with ``deploy/docker/`` and no registry.

The base is ``deploy/docker/make-base.sh`` (mmdebstrap, ``docker import``, reused by tag); the images
are ``deploy/docker/build-images.sh`` on it, tagged ``mirbad-test/{master,agent}:run-<id>`` so that
parallel checkouts sharing one dockerd never use each other's builds. At the end each is retagged
``:last`` (the builder's cache keeps its layers, so the next build of unchanged wheels is quick; the
previous ``:last`` and its layers go) and the run's tag is removed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest
from tests._support.real_parts import required_parts, uv_path

ROOT: Final = Path(__file__).resolve().parents[2]
DOCKER_DIR: Final = ROOT / "deploy" / "docker"
REPOSITORY: Final = "mirbad-test"
BASE_TIMEOUT_S: Final = 900
"""mmdebstrap of the base: about 2.5 minutes here (downloads included), once per machine."""
BUILD_TIMEOUT_S: Final = 900


@dataclass(frozen=True)
class Images:
    """The base and the two images one test module uses."""

    base: str
    master: str
    agent: str


def missing_or_fail(reason: str) -> None:
    """Skip with ``reason``, or fail with it when ``MIRBAD_REQUIRE`` names ``deploy``."""
    if "deploy" in required_parts():
        pytest.fail(reason)
    pytest.skip(reason)


def check_tools(*tools: str) -> None:
    """Skip (or fail, under ``MIRBAD_REQUIRE=deploy``) unless every one of ``tools`` is on PATH."""
    absent = [tool for tool in tools if shutil.which(tool) is None]
    if absent:
        missing_or_fail(f"{' and '.join(absent)} not installed (Debian packages: {' '.join(absent)})")


def make_base() -> str:
    """The local Debian base's tag, built when missing."""
    done = _run(["bash", str(DOCKER_DIR / "make-base.sh")], BASE_TIMEOUT_S)
    return done.stdout.strip().splitlines()[-1]


@contextlib.contextmanager
def built_images(context: Path) -> Iterator[Images]:
    """Build both images into fresh tags for this run; remove the tags afterwards."""
    base = make_base()
    version = f"run-{uuid.uuid4().hex[:10]}"
    command = ["bash", str(DOCKER_DIR / "build-images.sh"), "--base", base, "--repository", REPOSITORY]
    command += ["--version", version, "--context", str(context)]
    images = Images(base, f"{REPOSITORY}/master:{version}", f"{REPOSITORY}/agent:{version}")
    uv = uv_path()
    if uv is None:
        missing_or_fail("uv is not installed (the images are built from its lock and its build)")
    try:
        built = _run(command, BUILD_TIMEOUT_S, env={**os.environ, "UV": str(uv)})
        assert built.stdout.split() == [images.master, images.agent], built.stdout
        yield images
    finally:
        for tag in (images.master, images.agent):
            # ":last" keeps the newest build (and so the builder's cache of its layers) and lets the
            # one before it go; the run's own tag goes.
            last = tag.rpartition(":")[0] + ":last"
            for command in (["tag", tag, last], ["image", "rm", tag]):
                subprocess.run(["docker", *command], capture_output=True, timeout=120, check=False)


def _run(
    command: list[str], timeout_s: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False, env=env)
    if done.returncode != 0:
        pytest.fail(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return done
