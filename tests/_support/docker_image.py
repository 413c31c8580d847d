"""The Docker image the container tests run: this machine's Python plus the fake vLLM, no registry.

The image is the running interpreter, the shared libraries it and its extension modules link, and
its standard library (without the test suite, IDLE, Tk and site-packages), imported as a single layer
with ``docker import``, plus ``tests/fakes/fake_vllm.py`` as the entrypoint, so the container runs
``fake_vllm.py <argv>`` just as a vLLM image runs ``vllm serve <argv>``. Files keep their host paths,
so the interpreter finds its prefix and its RUNPATH without any configuration.

The tag is a hash of the inputs (interpreter, fake, this builder): an unchanged checkout reuses the
image, a changed fake rebuilds it, and older tags are removed.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import docker
import pytest

REPOSITORY = "mirbad-test-vllm"
FAKE_VLLM = Path(__file__).resolve().parents[1] / "fakes" / "fake_vllm.py"
FAKE_IN_IMAGE = "/opt/mirbad/fake_vllm.py"
_SKIPPED_STDLIB = {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "site-packages",
                   "dist-packages", "__pycache__", "pydoc_data"}  # fmt: skip
_SKIPPED_EXTENSIONS = ("_tkinter", "_test", "xxlimited")
_BUILD_LOCK_TIMEOUT_S = 120


def test_image_tag() -> str:
    """The tag the image has for the current interpreter, fake and builder."""
    digest = hashlib.sha256()
    for part in (str(_interpreter()), sys.version, FAKE_VLLM.read_text(), Path(__file__).read_text()):
        digest.update(part.encode())
        digest.update(b"\0")
    return f"{REPOSITORY}:{digest.hexdigest()[:12]}"


def ensure_test_image(client: Any) -> str:
    """Build the test image unless it exists; return its tag."""
    tag = test_image_tag()
    with _build_lock():
        if not _has_image(client, tag):
            _build(client, tag)
        _remove_older(client, tag)
    return tag


def _build(client: Any, tag: str) -> None:
    repository, _, version = tag.partition(":")
    with tempfile.TemporaryDirectory(prefix="mirbad-image-") as scratch:
        archive = Path(scratch) / "rootfs.tar"
        libraries = _write_rootfs(archive)
        changes = [
            "ENTRYPOINT " + json.dumps([str(_interpreter()), "-u", FAKE_IN_IMAGE]),
            "ENV LD_LIBRARY_PATH=" + ":".join(sorted({str(path.parent) for path in libraries})),
            "ENV PYTHONDONTWRITEBYTECODE=1",
            "ENV PYTHONUTF8=1",
            "EXPOSE 8000/tcp",
        ]
        client.api.import_image_from_file(str(archive), repository=repository, tag=version, changes=changes)


def _write_rootfs(archive: Path) -> list[Path]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    extensions = [
        path
        for path in (stdlib / "lib-dynload").glob("*.so")
        if not path.name.startswith(_SKIPPED_EXTENSIONS)
    ]
    libraries = _linked_libraries([_interpreter(), *extensions])
    with tarfile.open(archive, "w", dereference=True) as tar:
        added: set[str] = set()
        for path in [_interpreter(), *libraries]:
            _add(tar, path, added)
        _add_directory(tar, "tmp", 0o1777, added)
        _add(tar, stdlib, added, skip=_skip_stdlib_entry)
        _add(tar, FAKE_VLLM, added, arcname=FAKE_IN_IMAGE)
    return libraries


def _add(
    tar: tarfile.TarFile, path: Path, added: set[str], *, arcname: str | None = None, skip: Any = None
) -> None:
    name = (arcname or str(path)).lstrip("/")
    for parent in reversed(Path(name).parents[:-1]):
        _add_directory(tar, str(parent), 0o755, added)
    if name not in added:
        added.add(name)
        tar.add(path, arcname=name, filter=skip)


def _add_directory(tar: tarfile.TarFile, name: str, mode: int, added: set[str]) -> None:
    if name in added:
        return
    added.add(name)
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, mode
    tar.addfile(info)


def _skip_stdlib_entry(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    parts = Path(info.name).parts
    if any(part in _SKIPPED_STDLIB or part.startswith("config-") for part in parts):
        return None
    if "lib-dynload" in parts and parts[-1].startswith(_SKIPPED_EXTENSIONS):
        return None
    return info


def _linked_libraries(binaries: list[Path]) -> list[Path]:
    """Every shared library (and the loader) ``ldd`` resolves for ``binaries``."""
    output = subprocess.run(
        ["ldd", *map(str, binaries)], capture_output=True, text=True, check=False, timeout=60
    ).stdout
    found: set[Path] = set()
    for line in output.splitlines():
        target = line.split("=>", 1)[1] if "=>" in line else line
        candidate = target.strip().split(" (", 1)[0].strip()
        # With several binaries ldd prints a "path:" header before each one's libraries.
        if candidate.startswith("/") and not candidate.endswith(":"):
            found.add(Path(candidate))
    return sorted(found)


def _interpreter() -> Path:
    # A virtual environment's python is a symlink to the real interpreter, whose prefix holds the stdlib.
    return Path(sys.executable).resolve()


def _has_image(client: Any, tag: str) -> bool:
    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def _remove_older(client: Any, keep: str) -> None:
    for image in client.images.list(name=REPOSITORY):
        if keep in image.tags:
            continue
        for tag in image.tags:
            # An image still used by a container of an interrupted run stays; the next build retries.
            with contextlib.suppress(docker.errors.APIError):
                client.images.remove(tag)


@contextmanager
def _build_lock() -> Iterator[None]:
    # Parallel test workers would otherwise build the same image at once.
    lock_path = Path(tempfile.gettempdir()) / "mirbad-test-image.lock"
    deadline = time.monotonic() + _BUILD_LOCK_TIMEOUT_S
    with lock_path.open("w") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"another test run held {lock_path} for {_BUILD_LOCK_TIMEOUT_S} s"
                    ) from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


RUN_LABEL = "mirbad-tests.run"
"""Label on every container a test starts, valued with the test's run id, so cleanup finds them all."""
SLEEPER: Final = [
    "-c",
    "import signal, sys, time; signal.signal(15, lambda *_: sys.exit(0)); time.sleep(3600)",
]
"""The argv (after the interpreter) of a plain service container: a stand-in for a database or a backup agent.

It leaves on SIGTERM: as PID 1 it would otherwise ignore it, and every stop would wait for the kill.
"""


@contextmanager
def service_container(
    client: Any, image: str, name: str, run_id: str, *, restart: str = "always"
) -> Iterator[str]:
    """A running throwaway container ``name`` of the test image (the sleeper, not the fake vLLM).

    It carries :data:`RUN_LABEL` = ``run_id`` (the dockerd is shared by parallel tests) and is removed
    at the end, whatever the test did to it.
    """
    client.containers.run(
        image,
        SLEEPER,
        entrypoint=[str(_interpreter())],  # the image holds the host's interpreter at its resolved path
        name=name,
        detach=True,
        labels={RUN_LABEL: run_id},
        restart_policy={"Name": restart},
    )
    try:
        yield name
    finally:
        for container in client.containers.list(all=True, filters={"label": f"{RUN_LABEL}={run_id}"}):
            with contextlib.suppress(docker.errors.NotFound):
                container.remove(force=True)


@pytest.fixture(scope="module")
def docker_client() -> Iterator[Any]:
    """A docker-py client of the real dockerd, one per test module."""
    client = docker.from_env(version="auto", timeout=30)
    yield client
    client.close()


@pytest.fixture(scope="module")
def image(docker_client: Any) -> str:
    """The fake-vLLM test image, built with ``docker import`` when missing."""
    return ensure_test_image(docker_client)
