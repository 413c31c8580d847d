"""Download jobs against the loopback hub and registry: whole folders only, verified, resumable."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from tests._support.model_hub import (
    CONFIG,
    PARAMS,
    PRIVATE_REPO,
    REPO,
    TEMPLATE,
    Drop,
    Hold,
    Sources,
)
from tests._support.polling import eventually

from mirbad_protocol.downloads import DownloadJob, HuggingFaceDownload, OllamaDownload
from mirbad_runtime.downloads import PARTIAL_SUFFIX, TEMP_PREFIX, DownloadManager
from mirbad_runtime.exceptions import (
    DownloadConflictError,
    DownloadNotFoundError,
    DownloadRefusedError,
    InsufficientSpaceError,
    SourceNeedsTokenError,
    SourceNotFoundError,
    SourceUnavailableError,
)

pytestmark = pytest.mark.anyio

WAIT_S = 30.0


def _manager(
    tmp_path: Path, servers: Sources, *, free: int = 1 << 40, retry_window_s: float = 60.0
) -> DownloadManager:
    (tmp_path / "models").mkdir(exist_ok=True)
    return DownloadManager(
        [tmp_path / "models"],
        tmp_path / "state",
        hf_endpoint=servers.hub_url,
        ollama_registry=servers.registry_url,
        free_space=lambda _root: free,
        space_margin_bytes=0,
        retry_window_s=retry_window_s,
        retry_pause_s=0.01,
    )


@pytest.fixture
async def manager(tmp_path: Path, servers: Sources) -> AsyncIterator[DownloadManager]:
    async with anyio.create_task_group() as group:
        built = _manager(tmp_path, servers)
        await group.start(built.run)
        yield built
        group.cancel_scope.cancel()


async def _ended(manager: DownloadManager, job: DownloadJob) -> DownloadJob:
    await eventually(
        lambda: manager.get(job.id).state in ("completed", "failed", "cancelled"), timeout_s=WAIT_S
    )
    return manager.get(job.id)


def _hf(folder: str = "tiny", **values: object) -> HuggingFaceDownload:
    return HuggingFaceDownload.model_validate({"repo_id": REPO, "folder": folder, **values})


async def _ended_in_an_outage(tmp_path: Path, servers: Sources, *, retry_window_s: float) -> DownloadJob:
    """Run the GGUF's download to its end on a manager with a short retry window while the hub drops it."""
    servers.hub.drop = Drop("weights/tiny.gguf", after_bytes=0, times=10_000)
    async with anyio.create_task_group() as group:
        short = _manager(tmp_path, servers, retry_window_s=retry_window_s)
        await group.start(short.run)
        job = await _ended(short, await short.start(_hf(allow_patterns=["*.gguf"])))
        group.cancel_scope.cancel()
    return job


async def test_a_hugging_face_folder_lands_whole_and_verified(
    manager: DownloadManager, servers: Sources, tmp_path: Path
) -> None:
    job = await _ended(manager, await manager.start(_hf(allow_patterns=["*.json", "*.gguf"])))
    assert (job.state, job.error, job.revision) == ("completed", None, servers.commit)
    folder = tmp_path / "models" / "tiny"
    assert (folder / "weights" / "tiny.gguf").read_bytes() == servers.gguf
    assert (folder / "config.json").read_bytes() == CONFIG
    assert not (folder / "README.md").exists()  # not matched by the allow patterns
    lfs = next(item for item in job.files if item.path == "weights/tiny.gguf")
    assert lfs.sha256 == hashlib.sha256(servers.gguf).hexdigest()
    assert job.done_bytes == job.total_bytes == len(servers.gguf) + len(CONFIG)
    assert [p.name for p in (tmp_path / "models").iterdir()] == ["tiny"]


async def test_an_ollama_model_lands_as_a_gguf_with_its_template_and_params(
    manager: DownloadManager, servers: Sources, tmp_path: Path
) -> None:
    request = OllamaDownload(model="tiny", folder="tiny-ollama")
    job = await _ended(manager, await manager.start(request))
    assert (job.state, job.source) == ("completed", "library/tiny:latest")
    folder = tmp_path / "models" / "tiny-ollama"
    assert (folder / "model.gguf").read_bytes() == servers.gguf
    assert (folder / "template").read_text() == TEMPLATE
    assert (folder / "params").read_text() == PARAMS
    assert (job.revision or "").startswith("sha256:")


async def test_a_blob_whose_digest_does_not_match_is_refused_and_removed(
    manager: DownloadManager, servers: Sources, tmp_path: Path
) -> None:
    digest = "sha256:" + hashlib.sha256(servers.gguf).hexdigest()
    servers.registry.corrupt.add(digest)
    job = await _ended(manager, await manager.start(OllamaDownload(model="tiny:latest", folder="bad")))
    assert job.state == "failed"
    assert "model.gguf" in (job.error or "")
    assert "sha256" in (job.error or "")
    assert not (tmp_path / "models" / "bad").exists()
    temp = tmp_path / "models" / f"{TEMP_PREFIX}{job.id}"
    assert not (temp / "model.gguf").exists()
    assert not (temp / f"model.gguf{PARTIAL_SUFFIX}").exists()


async def test_cancel_mid_file_leaves_no_model_folder_and_remove_deletes_the_partial(
    manager: DownloadManager, servers: Sources, tmp_path: Path
) -> None:
    servers.hub.hold = hold = Hold("weights/tiny.gguf", after_bytes=64 * 1024)
    job = await manager.start(_hf(allow_patterns=["*.gguf"]))
    with anyio.fail_after(WAIT_S):
        await hold.reached.wait()
    temp = tmp_path / "models" / f"{TEMP_PREFIX}{job.id}"
    partial = temp / "weights" / f"tiny.gguf{PARTIAL_SUFFIX}"
    await eventually(lambda: manager.get(job.id).done_bytes > 0, timeout_s=WAIT_S)
    cancelled = await manager.cancel(job.id)
    assert cancelled.state == "cancelled"
    assert 0 < partial.stat().st_size < len(servers.gguf)
    assert not (tmp_path / "models" / "tiny").exists()
    with pytest.raises(DownloadConflictError):
        await manager.cancel(job.id)
    await manager.remove(job.id)
    assert not temp.exists()
    with pytest.raises(DownloadNotFoundError):
        manager.get(job.id)


async def test_a_restarted_manager_resumes_with_a_range_from_what_is_on_disk(
    tmp_path: Path, servers: Sources
) -> None:
    servers.hub.hold = hold = Hold("weights/tiny.gguf", after_bytes=128 * 1024)
    async with anyio.create_task_group() as group:
        first = _manager(tmp_path, servers)
        await group.start(first.run)
        job = await first.start(_hf(allow_patterns=["*.gguf"]))
        partial = tmp_path / "models" / f"{TEMP_PREFIX}{job.id}" / "weights" / f"tiny.gguf{PARTIAL_SUFFIX}"
        with anyio.fail_after(WAIT_S):
            await hold.reached.wait()
        await eventually(lambda: partial.is_file() and partial.stat().st_size > 0, timeout_s=WAIT_S)
        group.cancel_scope.cancel()  # the agent stops mid-file: nothing marks the job stopped
    on_disk = partial.stat().st_size
    hold.release()
    async with anyio.create_task_group() as group:
        second = _manager(tmp_path, servers)
        await group.start(second.run)
        resumed = await _ended(second, second.get(job.id))
        group.cancel_scope.cancel()
    assert resumed.state == "completed", resumed.error
    assert ("weights/tiny.gguf", f"bytes={on_disk}-") in servers.hub.requests
    assert (tmp_path / "models" / "tiny" / "weights" / "tiny.gguf").read_bytes() == servers.gguf


async def test_a_full_disk_is_refused_before_anything_is_written(tmp_path: Path, servers: Sources) -> None:
    async with anyio.create_task_group() as group:
        small = _manager(tmp_path, servers, free=1000)
        await group.start(small.run)
        with pytest.raises(InsufficientSpaceError) as refused:
            await small.start(_hf())
        group.cancel_scope.cancel()
    needed = len(servers.gguf) + len(CONFIG) + 2
    assert refused.value.shortfall_bytes == needed - 1000
    assert f"{needed - 1000} bytes short" in str(refused.value)
    assert list((tmp_path / "models").iterdir()) == []
    assert not servers.hub.requests  # no file was fetched


@pytest.mark.parametrize(
    ("request_", "error", "field"),
    [
        (_hf(revision="v9"), SourceNotFoundError, "revision"),
        (HuggingFaceDownload(repo_id="mirbad/nope", folder="x"), SourceNotFoundError, "repoId"),
        (HuggingFaceDownload(repo_id=PRIVATE_REPO, folder="x"), SourceNeedsTokenError, "token"),
        (_hf(allow_patterns=["*.onnx"]), SourceNotFoundError, "allowPatterns"),
        (OllamaDownload(model="tiny:nope", folder="x"), SourceNotFoundError, "model"),
        (_hf(root=3), DownloadRefusedError, "root"),
    ],
)
async def test_bad_sources_are_refused_naming_the_field(
    manager: DownloadManager,
    tmp_path: Path,
    request_: HuggingFaceDownload | OllamaDownload,
    error: type[Exception],
    field: str,
) -> None:
    with pytest.raises(error) as refused:
        await manager.start(request_)
    assert getattr(refused.value, "field", None) == field
    assert list((tmp_path / "models").iterdir()) == []


async def test_a_private_repository_without_a_token_says_it_needs_one(manager: DownloadManager) -> None:
    with pytest.raises(SourceNeedsTokenError, match="this repository needs a token"):
        await manager.start(HuggingFaceDownload(repo_id=PRIVATE_REPO, folder="x"))


async def test_a_token_is_sent_stored_owner_only_and_never_shown(
    manager: DownloadManager, servers: Sources, tmp_path: Path
) -> None:
    request = HuggingFaceDownload(repo_id=PRIVATE_REPO, folder="private", token=servers.hub.token)
    job = await _ended(manager, await manager.start(request))
    assert job.state == "completed", job.error
    assert f"Bearer {servers.hub.token}" in servers.hub.authorizations
    assert servers.hub.token not in job.model_dump_json()
    assert servers.hub.token not in repr(request)
    for record in (tmp_path / "state").iterdir():
        assert servers.hub.token not in record.read_text()  # the token file is gone once the job ends


async def test_an_existing_target_folder_is_refused(manager: DownloadManager, tmp_path: Path) -> None:
    (tmp_path / "models" / "tiny").mkdir()
    with pytest.raises(DownloadConflictError, match="already exists"):
        await manager.start(_hf())


async def test_the_token_waits_owner_only_while_its_job_runs(
    manager: DownloadManager, servers: Sources, tmp_path: Path
) -> None:
    servers.hub.hold = hold = Hold("config.json", after_bytes=5)
    request = HuggingFaceDownload(repo_id=PRIVATE_REPO, folder="private", token=servers.hub.token)
    job = await manager.start(request)
    with anyio.fail_after(WAIT_S):
        await hold.reached.wait()
    token_file = tmp_path / "state" / f"{job.id}.token"
    assert token_file.read_text() == servers.hub.token
    assert token_file.stat().st_mode & 0o777 == 0o600
    assert servers.hub.token not in (tmp_path / "state" / f"{job.id}.json").read_text()
    hold.release()
    assert (await _ended(manager, job)).state == "completed"
    assert not token_file.exists()


async def test_a_dropped_connection_resumes_with_a_range_in_the_same_job(
    manager: DownloadManager, servers: Sources, tmp_path: Path
) -> None:
    servers.hub.drop = Drop("weights/tiny.gguf", after_bytes=64 * 1024)
    job = await _ended(manager, await manager.start(_hf(allow_patterns=["*.gguf"])))
    assert job.state == "completed", job.error
    ranges = [offset for path, offset in servers.hub.requests if path == "weights/tiny.gguf"]
    assert ranges[0] is None
    assert len(ranges) == 2
    assert ranges[1] is not None
    assert int(ranges[1].removeprefix("bytes=").rstrip("-")) >= 64 * 1024
    assert (tmp_path / "models" / "tiny" / "weights" / "tiny.gguf").read_bytes() == servers.gguf


# ------------------------------------------------------------------ issue 31 item 10: retries and resume


async def _held(
    manager: DownloadManager, servers: Sources, request: HuggingFaceDownload
) -> tuple[DownloadJob, Hold]:
    """Start ``request`` with its GGUF held mid-file, once part of it is on disk."""
    servers.hub.hold = hold = Hold("weights/tiny.gguf", after_bytes=64 * 1024)
    job = await manager.start(request)
    with anyio.fail_after(WAIT_S):
        await hold.reached.wait()
    await eventually(lambda: manager.get(job.id).done_bytes > 0, timeout_s=WAIT_S)
    return job, hold


def _gguf_ranges(servers: Sources) -> list[str | None]:
    return [offset for path, offset in servers.hub.requests if path == "weights/tiny.gguf"]


async def test_an_outage_longer_than_a_few_attempts_is_ridden_out_within_the_window(
    manager: DownloadManager, servers: Sources
) -> None:
    # The old code gave up after four attempts in about 3 s; the window (60 s here) outlasts ten failures.
    servers.hub.drop = Drop("weights/tiny.gguf", after_bytes=0, times=10)
    job = await _ended(manager, await manager.start(_hf(allow_patterns=["*.gguf"])))
    assert job.state == "completed", job.error
    assert len(_gguf_ranges(servers)) == 11


async def test_a_source_that_stays_down_fails_once_the_window_is_over(
    tmp_path: Path, servers: Sources
) -> None:
    job = await _ended_in_an_outage(tmp_path, servers, retry_window_s=0.3)
    assert job.state == "failed"
    assert "retry window" in (job.error or "")
    assert 1 < len(_gguf_ranges(servers)) < 10_000


async def test_retry_resumes_a_cancelled_job_from_the_bytes_on_disk(
    manager: DownloadManager, servers: Sources, tmp_path: Path
) -> None:
    job, hold = await _held(manager, servers, _hf(allow_patterns=["*.gguf"]))
    assert (await manager.cancel(job.id)).state == "cancelled"
    partial = tmp_path / "models" / f"{TEMP_PREFIX}{job.id}" / "weights" / f"tiny.gguf{PARTIAL_SUFFIX}"
    on_disk = partial.stat().st_size
    assert on_disk > 0
    hold.release()
    retried = await manager.retry(job.id)
    assert (retried.id, retried.state) == (job.id, "queued")
    ended = await _ended(manager, retried)
    assert ended.state == "completed", ended.error
    assert _gguf_ranges(servers)[-1] == f"bytes={on_disk}-"
    assert (tmp_path / "models" / "tiny" / "weights" / "tiny.gguf").read_bytes() == servers.gguf


async def test_retry_is_refused_for_a_job_that_has_not_stopped(manager: DownloadManager) -> None:
    job = await _ended(manager, await manager.start(_hf(allow_patterns=["config.json"])))
    with pytest.raises(DownloadConflictError) as refused:
        await manager.retry(job.id)
    assert refused.value.field == "state"
    with pytest.raises(DownloadNotFoundError):
        await manager.retry("dl-000000000000")


async def test_a_new_job_for_the_same_source_and_folder_adopts_the_partial(
    manager: DownloadManager, servers: Sources, tmp_path: Path
) -> None:
    old, hold = await _held(manager, servers, _hf(allow_patterns=["*.gguf"]))
    await manager.cancel(old.id)
    old_temp = tmp_path / "models" / f"{TEMP_PREFIX}{old.id}"
    on_disk = (old_temp / "weights" / f"tiny.gguf{PARTIAL_SUFFIX}").stat().st_size
    hold.release()
    new = await _ended(manager, await manager.start(_hf(allow_patterns=["*.gguf"])))
    assert new.state == "completed", new.error
    assert _gguf_ranges(servers)[-1] == f"bytes={on_disk}-"
    assert [job.id for job in manager.jobs()] == [new.id]  # the old job handed its files over
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["tiny"]


# ------------------------------------------------------------------ issue 31 item 9: records on a full disk


async def test_a_job_ends_and_is_removed_even_when_its_record_cannot_be_written(
    manager: DownloadManager, servers: Sources, tmp_path: Path
) -> None:
    job, hold = await _held(manager, servers, _hf(allow_patterns=["*.gguf"]))
    record = tmp_path / "state" / f"{job.id}.json"
    record.unlink()
    record.mkdir()  # every atomic replace of the record now fails, as on a full disk
    assert (await manager.cancel(job.id)).state == "cancelled"
    hold.release()
    await manager.remove(job.id)
    assert list((tmp_path / "models").iterdir()) == []
    with pytest.raises(DownloadNotFoundError):
        manager.get(job.id)


async def test_a_failing_job_reaches_failed_when_its_record_cannot_be_written(
    tmp_path: Path, servers: Sources
) -> None:
    servers.hub.drop = Drop("weights/tiny.gguf", after_bytes=0, times=10_000)
    async with anyio.create_task_group() as group:
        short = _manager(tmp_path, servers, retry_window_s=0.5)
        await group.start(short.run)
        job = await short.start(_hf(allow_patterns=["*.gguf"]))
        record = tmp_path / "state" / f"{job.id}.json"
        record.unlink()
        record.mkdir()
        ended = await _ended(short, job)
        group.cancel_scope.cancel()
    assert ended.state == "failed"


# ------------------------------------------------------------------ issue 31 items 11 and 12


async def test_a_corrupt_file_outside_lfs_never_completes(
    manager: DownloadManager, servers: Sources, tmp_path: Path
) -> None:
    servers.hub.corrupt.add("config.json")  # same size, one byte flipped: a size check passes it
    job = await _ended(manager, await manager.start(_hf()))
    assert job.state == "failed"
    assert "config.json" in (job.error or "")
    assert "git blob id" in (job.error or "")
    assert not (tmp_path / "models" / "tiny").exists()
    config = next(item for item in job.files if item.path == "config.json")
    assert config.git_sha1 is not None
    assert config.sha256 is None


async def test_a_failed_job_with_nothing_verified_leaves_no_temporary_folder(
    tmp_path: Path, servers: Sources
) -> None:
    job = await _ended_in_an_outage(tmp_path, servers, retry_window_s=0.2)
    assert job.state == "failed"
    assert list((tmp_path / "models").iterdir()) == []


async def test_temporary_folders_no_job_owns_are_removed_at_start(tmp_path: Path, servers: Sources) -> None:
    orphan = tmp_path / "models" / f"{TEMP_PREFIX}dl-0123456789ab"
    orphan.mkdir(parents=True)
    (orphan / "model.gguf.partial").write_bytes(b"x" * 10)
    async with anyio.create_task_group() as group:
        await group.start(_manager(tmp_path, servers).run)
        group.cancel_scope.cancel()
    assert not orphan.exists()


async def test_a_conflict_names_the_folder_and_not_the_nodes_path(
    manager: DownloadManager, tmp_path: Path
) -> None:
    (tmp_path / "models" / "tiny").mkdir()
    with pytest.raises(DownloadConflictError) as refused:
        await manager.start(_hf())
    assert refused.value.field == "folder"
    assert str(tmp_path) not in str(refused.value)


async def test_a_manifest_digest_with_a_trailing_newline_is_refused(
    manager: DownloadManager, servers: Sources
) -> None:
    key = ("library/tiny", "latest")
    manifest = json.loads(servers.registry.manifests[key])
    manifest["layers"][0]["digest"] += "\n"
    servers.registry.manifests[key] = json.dumps(manifest).encode()
    with pytest.raises(SourceUnavailableError, match="not readable"):
        await manager.start(OllamaDownload(model="tiny", folder="x"))


async def test_a_folder_that_appears_meanwhile_fails_the_job_without_paths_and_retry_finishes_it(
    manager: DownloadManager, servers: Sources, tmp_path: Path
) -> None:
    job, hold = await _held(manager, servers, _hf(allow_patterns=["*.gguf"]))
    (tmp_path / "models" / "tiny").mkdir()
    hold.release()
    failed = await _ended(manager, job)
    assert failed.state == "failed"
    assert "tiny appeared in model root 0" in (failed.error or "")
    assert str(tmp_path) not in (failed.error or "")
    (tmp_path / "models" / "tiny").rmdir()
    requests = len(servers.hub.requests)
    done = await _ended(manager, await manager.retry(job.id))
    assert done.state == "completed", done.error
    assert len(servers.hub.requests) == requests  # every byte was already verified on disk


async def test_a_plan_lists_the_files_a_start_would_fetch_and_writes_nothing(
    tmp_path: Path, servers: Sources, manager: DownloadManager
) -> None:
    plan = await manager.plan(_hf(allow_patterns=["*.gguf"]))
    assert (plan.revision, [(f.path, f.size) for f in plan.files]) == (
        servers.commit,
        [("weights/tiny.gguf", len(servers.gguf))],
    )
    # A folder that exists does not stop a plan: only a start writes it.
    (tmp_path / "models" / "tiny").mkdir()
    assert (await manager.plan(_hf())).revision == servers.commit
    assert manager.jobs() == []
    assert [path.name for path in (tmp_path / "models").iterdir()] == ["tiny"]


async def test_a_plan_needs_a_running_manager(tmp_path: Path, servers: Sources) -> None:
    with pytest.raises(DownloadConflictError, match="not running"):
        await _manager(tmp_path, servers).plan(_hf())
