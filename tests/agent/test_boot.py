"""The agent's boot id on bare metal and in a container (issue: compose up after down is a new boot)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirbad_agent import boot_id, in_container

KERNEL = "8f1c3c7e-2d4a-4b8e-9c1a-0d6f5e4b3a21"


def host(tmp_path: Path, *, kernel: str | None = KERNEL, init_start: int | None = 17) -> Path:
    """A stand-in root: /proc's boot id and PID 1's stat line (the command has a space and a paren)."""
    proc = tmp_path / "proc"
    (proc / "sys/kernel/random").mkdir(parents=True)
    (proc / "1").mkdir()
    if kernel is not None:
        (proc / "sys/kernel/random/boot_id").write_text(f"{kernel}\n")
    if init_start is not None:
        fields = ["S", "0", "1", "1", *["0"] * 15, str(init_start), "0"]
        (proc / "1/stat").write_text(f"1 (tini (x) --) {' '.join(fields)}\n")
    return tmp_path


def docker_container(tmp_path: Path, init_start: int) -> Path:
    root = host(tmp_path, init_start=init_start)
    (root / ".dockerenv").touch()
    return root


def test_bare_metal_reports_the_kernels_boot_id_alone(tmp_path: Path) -> None:
    root = host(tmp_path)
    assert not in_container(root, {})
    assert boot_id(root, {}) == KERNEL


def test_in_a_container_the_boot_id_is_the_kernels_and_pid_1s_start(tmp_path: Path) -> None:
    assert boot_id(docker_container(tmp_path, 4242), {}) == f"{KERNEL}/4242"


def test_a_recreated_container_on_the_same_kernel_boot_is_a_new_boot(tmp_path: Path) -> None:
    # compose down + up: same kernel, a new PID namespace whose PID 1 started later.
    before = boot_id(docker_container(tmp_path / "old", 4242), {})
    after = boot_id(docker_container(tmp_path / "new", 98765), {})
    assert before != after
    assert (before, after) == (f"{KERNEL}/4242", f"{KERNEL}/98765")


def test_the_same_container_reports_the_same_boot_id_every_time(tmp_path: Path) -> None:
    root = docker_container(tmp_path, 4242)
    assert boot_id(root, {}) == boot_id(root, {})


@pytest.mark.parametrize(
    ("marker", "environ"),
    [(".dockerenv", {}), ("run/.containerenv", {}), (None, {"KUBERNETES_SERVICE_HOST": "10.0.0.1"})],
    ids=["docker", "podman", "kubernetes"],
)
def test_each_container_runtime_is_recognised(
    tmp_path: Path, marker: str | None, environ: dict[str, str]
) -> None:
    root = host(tmp_path, init_start=99)
    if marker is not None:
        (root / marker).parent.mkdir(parents=True, exist_ok=True)
        (root / marker).touch()
    assert in_container(root, environ)
    assert boot_id(root, environ) == f"{KERNEL}/99"


def test_without_a_kernel_boot_id_there_is_none(tmp_path: Path) -> None:
    root = host(tmp_path, kernel=None)
    (root / ".dockerenv").touch()
    assert boot_id(root, {}) is None


def test_a_container_whose_pid_1_cannot_be_read_falls_back_to_the_kernels(tmp_path: Path) -> None:
    root = host(tmp_path, init_start=None)
    (root / ".dockerenv").touch()
    assert boot_id(root, {}) == KERNEL


def test_this_machine_reports_one(tmp_path: Path) -> None:
    if not Path("/proc/sys/kernel/random/boot_id").exists():
        pytest.skip("no Linux boot id here")
    found = boot_id()
    assert found is not None
    assert found.startswith(Path("/proc/sys/kernel/random/boot_id").read_text().strip())
