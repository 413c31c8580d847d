"""Download jobs against the loopback hub and registry: whole folders only, verified, resumable."""

from __future__ import annotations

import hashlib
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
    loopback_sources,
)
from tests._support.polling import eventually
from tests._support.tiny_gguf import write_tiny_gguf

from mirbad_protocol import DownloadJob, HuggingFaceDownload, OllamaDownload
from mirbad_runtime.downloads import PARTIAL_SUFFIX, TEMP_PREFIX, DownloadManager
from mirbad_runtime.exceptions import (
    DownloadConflictError,
    DownloadNotFoundError,
    DownloadRefusedError,
    InsufficientSpaceError,
    SourceNeedsTokenError,
    SourceNotFoundError,
)

pytestmark = pytest.mark.anyio

WAIT_S = 30.0


@pytest.fixture(scope="module")
def gguf_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf").read_bytes()


@pytest.fixture
async def servers(gguf_bytes: bytes) -> AsyncIterator[Sources]:
    async with loopback_sources(gguf_bytes) as sources:
        yield sources


def _manager(tmp_path: Path, servers: Sources, *, free: int = 1 << 40) -> DownloadManager:
    (tmp_path / "models").mkdir(exist_ok=True)
    return DownloadManager(
        [tmp_path / "models"],
        tmp_path / "state",
        hf_endpoint=servers.hub_url,
        ollama_registry=servers.registry_url,
        free_space=lambda _root: free,
        space_margin_bytes=0,
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
