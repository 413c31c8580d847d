"""Disk space for downloads (issue 31 item 9): reservations of running jobs, a kept margin, a stop
before the disk is full. The free space comes from a probe the test sets, at the manager's boundary."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests._support.model_hub import CONFIG, REPO, Hold, Sources
from tests._support.polling import eventually

from mirbad_protocol.downloads import DownloadJob, HuggingFaceDownload
from mirbad_runtime.downloads import DownloadManager, SpaceGuard, unexpected_failure
from mirbad_runtime.exceptions import InsufficientSpaceError, StateWriteError

pytestmark = pytest.mark.anyio

WAIT_S = 30.0
BIG = bytes(range(256)) * (40 * 1024)  # 10 MiB: more than one free-space check apart
BIG_REPO = "mirbad/big"


@pytest.fixture
def servers(servers: Sources) -> Sources:
    # The shared loopback sources, plus a repo big enough to span several free-space checks.
    servers.hub.add_repo(BIG_REPO, {"big.bin": BIG})
    return servers


class Disk:
    """A free-space probe the test turns: ``free`` bytes, whatever the downloads wrote."""

    def __init__(self, free: int) -> None:
        self.free = free

    def __call__(self, _root: Path) -> int:
        return self.free


def _manager(tmp_path: Path, servers: Sources, disk: Disk, *, margin: int = 0) -> DownloadManager:
    (tmp_path / "models").mkdir(exist_ok=True)
    return DownloadManager(
        [tmp_path / "models"],
        tmp_path / "state",
        hf_endpoint=servers.hub_url,
        free_space=disk,
        space_margin_bytes=margin,
    )


async def _ended(manager: DownloadManager, job: DownloadJob) -> DownloadJob:
    await eventually(
        lambda: manager.get(job.id).state in ("completed", "failed", "cancelled"), timeout_s=WAIT_S
    )
    return manager.get(job.id)


def test_a_guard_admits_what_fits_beside_the_reservations_and_the_margin(tmp_path: Path) -> None:
    guard = SpaceGuard(lambda _root: 1000, margin_bytes=100)
    guard.check(tmp_path, 600, [300])
    with pytest.raises(InsufficientSpaceError) as refused:
        guard.check(tmp_path, 601, [300], label="model root 0")
    assert (refused.value.needed_bytes, refused.value.free_bytes) == (601, 600)
    assert "model root 0" in str(refused.value)
    assert str(tmp_path) not in str(refused.value)


async def test_two_jobs_that_each_fit_are_not_both_admitted(tmp_path: Path, servers: Sources) -> None:
    disk = Disk(len(BIG) + len(BIG) // 2)
    servers.hub.hold = hold = Hold("big.bin", after_bytes=64 * 1024)
    async with anyio.create_task_group() as group:
        manager = _manager(tmp_path, servers, disk)
        await group.start(manager.run)
        first = await manager.start(HuggingFaceDownload(repo_id=BIG_REPO, folder="one"))
        with anyio.fail_after(WAIT_S):
            await hold.reached.wait()
        # The first job has written little yet, so free space alone would let the second one in.
        with pytest.raises(InsufficientSpaceError) as refused:
            await manager.start(HuggingFaceDownload(repo_id=BIG_REPO, folder="two"))
        assert refused.value.field == "root"
        await manager.cancel(first.id)
        # A stopped job reserves nothing any more.
        second = await manager.start(HuggingFaceDownload(repo_id=BIG_REPO, folder="two"))
        hold.release()
        assert (await _ended(manager, second)).state == "completed"
        group.cancel_scope.cancel()


async def test_the_margin_is_kept_free(tmp_path: Path, servers: Sources) -> None:
    needed = len(CONFIG)
    disk = Disk(needed + 4096 - 1)
    async with anyio.create_task_group() as group:
        manager = _manager(tmp_path, servers, disk, margin=4096)
        await group.start(manager.run)
        request = HuggingFaceDownload(repo_id=REPO, folder="tiny", allow_patterns=["config.json"])
        with pytest.raises(InsufficientSpaceError):
            await manager.start(request)
        disk.free += 1
        assert (await _ended(manager, await manager.start(request))).state == "completed"
        group.cancel_scope.cancel()


async def test_a_transfer_stops_with_insufficient_space_before_the_disk_is_full(
    tmp_path: Path, servers: Sources
) -> None:
    disk = Disk(1 << 40)
    servers.hub.hold = hold = Hold("big.bin", after_bytes=64 * 1024)
    async with anyio.create_task_group() as group:
        manager = _manager(tmp_path, servers, disk, margin=1 << 20)
        await group.start(manager.run)
        job = await manager.start(HuggingFaceDownload(repo_id=BIG_REPO, folder="big"))
        with anyio.fail_after(WAIT_S):
            await hold.reached.wait()
        disk.free = 2 << 20  # something else filled the disk: the rest cannot fit above the margin
        hold.release()
        ended = await _ended(manager, job)
        group.cancel_scope.cancel()
    assert ended.state == "failed"
    assert "not enough free space" in (ended.error or "")
    assert ended.done_bytes < len(BIG)
    assert not (tmp_path / "models" / "big").exists()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs (where this machine lets the test mount one)."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True, check=False
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


async def test_a_really_full_disk_fails_the_job_and_remove_frees_it(
    small_disk: Path, servers: Sources
) -> None:
    # The probe lies (plenty free) so the job starts; the disk then really fills, records included.
    (small_disk / "models").mkdir()
    manager = DownloadManager(
        [small_disk / "models"],
        small_disk / "state",
        hf_endpoint=servers.hub_url,
        free_space=Disk(1 << 40),
        space_margin_bytes=0,
        retry_window_s=0.5,
        retry_pause_s=0.01,
    )
    async with anyio.create_task_group() as group:
        await group.start(manager.run)
        job = await manager.start(HuggingFaceDownload(repo_id=BIG_REPO, folder="big"))
        ended = await _ended(manager, job)
        assert ended.state == "failed"
        assert "insufficient space" in (ended.error or "")
        await manager.remove(job.id)
        group.cancel_scope.cancel()
    assert list((small_disk / "models").iterdir()) == []
    assert shutil.disk_usage(small_disk).used < 1 << 20


async def test_a_start_whose_record_cannot_be_written_on_a_full_disk_is_refused_and_leaves_nothing(
    small_disk: Path, servers: Sources, tmp_path: Path
) -> None:
    with contextlib.suppress(OSError), (small_disk / "filler").open("wb") as filler:
        while True:  # the state folder's disk is full to the last block
            filler.write(b"\0" * 65536)
            filler.flush()
    (tmp_path / "models").mkdir()
    manager = DownloadManager(
        [tmp_path / "models"], small_disk / "state", hf_endpoint=servers.hub_url, space_margin_bytes=0
    )
    async with anyio.create_task_group() as group:
        await group.start(manager.run)
        with pytest.raises(StateWriteError) as refused:
            await manager.start(
                HuggingFaceDownload(repo_id=REPO, folder="tiny", allow_patterns=["config.json"])
            )
        assert refused.value.disk_full
        assert manager.jobs() == []
        group.cancel_scope.cancel()
    assert list((tmp_path / "models").iterdir()) == []


class BrokenDisk(Disk):
    """A probe that answers once (the start's check), then fails as a broken mount would."""

    def __init__(self, free: int, failure: OSError) -> None:
        super().__init__(free)
        self.failure = failure
        self.calls = 0

    def __call__(self, root: Path) -> int:
        self.calls += 1
        if self.calls > 1:
            raise self.failure
        return super().__call__(root)


async def test_an_unexpected_failure_says_what_failed_without_the_nodes_paths(
    tmp_path: Path, servers: Sources
) -> None:
    partial = tmp_path / "models" / ".mirbad-download-x" / "big.bin"
    disk = BrokenDisk(10 * len(BIG), PermissionError(13, "Permission denied", str(partial)))
    async with anyio.create_task_group() as group:
        manager = _manager(tmp_path, servers, disk)
        await group.start(manager.run)
        job = await manager.start(HuggingFaceDownload(repo_id=BIG_REPO, folder="big"))
        failed = await _ended(manager, job)
        group.cancel_scope.cancel()

    assert failed.state == "failed"
    assert failed.error == (
        "unexpected failure: Permission denied (EACCES) on model root 0: .mirbad-download-x/big.bin"
    )
    assert str(tmp_path) not in (failed.error or "")


_PART = st.text(
    st.characters(codec="ascii", categories=["L", "N"]) | st.sampled_from("._-"), min_size=1, max_size=12
)


@given(
    roots=st.lists(st.lists(_PART, min_size=1, max_size=3), min_size=1, max_size=3),
    inside=st.lists(_PART, min_size=1, max_size=3),
    outside=st.lists(_PART, min_size=2, max_size=3),
)
def test_no_absolute_path_survives_in_an_unexpected_failure(
    roots: list[list[str]], inside: list[str], outside: list[str]
) -> None:
    paths = [Path("/", *parts) for parts in roots]
    in_root = paths[-1].joinpath(*inside)
    elsewhere = Path("/", "srv-cache", *outside)
    failures: list[BaseException] = [
        PermissionError(13, "Permission denied", str(in_root)),
        OSError(5, "Input/output error", str(elsewhere), None, str(in_root)),
        RuntimeError(f"cannot move {in_root} to '{elsewhere}'"),
    ]
    for failure in failures:
        message = unexpected_failure(failure, paths)
        assert message.startswith("unexpected failure: ")
        assert str(in_root) not in message
        assert str(elsewhere) not in message
