"""The restore job over the real stores and a hand-written fleet: order, downloads, starts, cancel."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import anyio
import pytest
from tests.orchestration._backups import CREATED_AT, PASSPHRASE, contents, model

from mirbad_orchestration.backups import (
    BackupDocument,
    RestoreHost,
    RestoreJobs,
    RestoreTimings,
    encode_backup,
    open_secrets,
    parse_backup,
)
from mirbad_orchestration.exceptions import (
    AgentAdmissionRefusedError,
    AgentStartConflictError,
    NoRestoreJobError,
    RestoreRunningError,
)
from mirbad_orchestration.keys import ApiKeyStore
from mirbad_orchestration.registry import ModelRegistry
from mirbad_orchestration.services import HostServicesStore
from mirbad_protocol import ModelDefinition, ModelSource
from mirbad_protocol.admin import ApiKeyRecord
from mirbad_protocol.downloads import DownloadJob, HuggingFaceDownload
from mirbad_protocol.restore import RestoreJobView

pytestmark = pytest.mark.anyio

FAST = RestoreTimings(poll_s=0.01, start_retries=3, start_retry_s=0.01)


@dataclass
class FakeFleet(RestoreHost):
    """The master's side, with nodes whose folders, downloads and starts the test decides."""

    registry: ModelRegistry
    keys: ApiKeyStore
    host_services: HostServicesStore
    present: dict[str, set[str]] = field(default_factory=dict)
    finish_downloads: bool = True
    start_refusals: dict[str, list[Exception]] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    downloads: dict[str, DownloadJob] = field(default_factory=dict)
    polls: int = 0

    def node_of(self, definition: ModelDefinition) -> str:
        return definition.placement.node_id if definition.placement else "local"

    async def models_changed(self) -> None:
        self.calls.append("models-changed")

    async def folders_present(self, node_id: str, paths: Sequence[str]) -> Mapping[str, bool] | None:
        if node_id not in self.present:
            return None
        return {path: path in self.present[node_id] for path in paths}

    async def start_download(self, node_id: str, request: HuggingFaceDownload, actor: str) -> DownloadJob:
        self.calls.append(f"download {node_id} {request.repo_id} {request.folder} by {actor}")
        job = DownloadJob(
            id=f"dl-{len(self.downloads):012x}",
            kind="huggingface",
            source=request.source,
            folder=request.folder,
            state="running",
            total_bytes=100,
            created_at=CREATED_AT,
            updated_at=CREATED_AT,
        )
        self.downloads[job.id] = job
        return job

    async def download(self, node_id: str, download_id: str) -> DownloadJob:
        self.polls += 1
        job = self.downloads[download_id]
        if self.finish_downloads and job.state == "running":
            job = job.model_copy(update={"state": "completed", "done_bytes": 100})
            self.present.setdefault(node_id, set()).add(job.folder)
        self.downloads[download_id] = job
        return job

    async def cancel_download(self, node_id: str, download_id: str, actor: str) -> None:
        self.calls.append(f"cancel {download_id}")
        self.downloads[download_id] = self.downloads[download_id].model_copy(update={"state": "cancelled"})

    async def start_model(self, model_id: str, actor: str) -> None:
        refusals = self.start_refusals.get(model_id, [])
        if refusals:
            raise refusals.pop(0)
        self.calls.append(f"start {model_id}")


@asynccontextmanager
async def running(fleet: FakeFleet) -> AsyncIterator[RestoreJobs]:
    jobs = RestoreJobs(fleet, timings=FAST)
    async with anyio.create_task_group() as tasks:
        await tasks.start(jobs.run)
        yield jobs
        tasks.cancel_scope.cancel()


@asynccontextmanager
async def fleet_at(tmp_path: Path) -> AsyncIterator[FakeFleet]:
    async with ApiKeyStore(tmp_path) as keys:
        yield FakeFleet(ModelRegistry(tmp_path), keys, HostServicesStore(tmp_path))


def _backup(models: list[ModelDefinition]) -> tuple[BackupDocument, list[ApiKeyRecord]]:
    fleet = replace(contents(), models=models)
    raw = encode_backup(fleet, host="master-box", created_at=CREATED_AT, passphrase=PASSPHRASE)
    backup = parse_backup(raw)
    return backup.document, list(open_secrets(backup, PASSPHRASE).api_keys)


def _models() -> list[ModelDefinition]:
    return [
        model("qwen", auto_start=True),  # its folder is missing: downloaded, then started
        model("tiny", sources=[], auto_start=True),  # missing, no source: manual
        model("kept", auto_start=False),  # present, not started
    ]


async def test_a_restore_imports_then_downloads_what_is_missing_and_starts(tmp_path: Path) -> None:
    document, keys = _backup(_models())
    async with fleet_at(tmp_path) as fleet, running(fleet) as jobs:
        fleet.present = {"gpu-1": {"kept"}}
        started = jobs.start(document, keys, actor="admin")
        view = await jobs.wait(timeout_s=10)
        stored = {m.id: m for m in await fleet.registry.list()}
        key_ids = [k.id for k in await fleet.keys.list()]
        services = await fleet.host_services.read()
    assert started.state == "running"
    assert (view.state, view.phase, view.error) == ("succeeded", "done", None)
    assert view.models_added == ["qwen", "tiny", "kept"]
    assert view.keys_added == ["k1aaaaaa", "k2bbbbbb"] == key_ids
    assert view.host_services_changed == ["gpu-1/open-webui"]
    assert [c.name for c in services.containers] == ["open-webui"]
    assert set(stored) >= {"qwen", "tiny", "kept"}
    steps = {m.model_id: (m.step, m.missing_folders) for m in view.models}
    assert steps == {"qwen": ("started", ["qwen"]), "tiny": ("manual", []), "kept": ("present", [])}
    qwen = next(m for m in view.models if m.model_id == "qwen")
    assert (qwen.node_id, qwen.done_bytes, qwen.total_bytes) == ("gpu-1", 100, 100)
    assert fleet.calls == ["models-changed", "download gpu-1 acme/qwen qwen by admin", "start qwen"]


async def test_a_start_conflict_is_tried_again_and_an_admission_refusal_leaves_the_model_stopped(
    tmp_path: Path,
) -> None:
    models = [model("qwen", auto_start=True), model("big", auto_start=True)]
    document, keys = _backup(models)
    async with fleet_at(tmp_path) as fleet, running(fleet) as jobs:
        fleet.present = {"gpu-1": {"qwen", "big"}}
        fleet.start_refusals = {
            "qwen": [AgentStartConflictError("gpu-1", 409, "start_conflict", "another start runs")],
            "big": [AgentAdmissionRefusedError("gpu-1", 409, "admission_refused", "8 GiB do not fit")],
        }
        jobs.start(document, keys, actor="admin")
        view = await jobs.wait(timeout_s=10)
    steps = {m.model_id: m.step for m in view.models}
    assert steps == {"qwen": "started", "big": "left-stopped"}
    big = next(m for m in view.models if m.model_id == "big")
    assert big.message is not None
    assert "8 GiB do not fit" in big.message
    assert view.state == "succeeded"


async def test_one_restore_at_a_time_and_cancel_stops_the_download_in_flight(tmp_path: Path) -> None:
    document, keys = _backup(_models())
    async with fleet_at(tmp_path) as fleet, running(fleet) as jobs:
        fleet.present = {"gpu-1": {"kept"}}
        fleet.finish_downloads = False
        jobs.start(document, keys, actor="admin")
        with anyio.fail_after(10):
            while fleet.polls < 2:  # noqa: ASYNC110 - the fake download only counts polls
                await anyio.sleep(0.01)
        with pytest.raises(RestoreRunningError):
            jobs.start(document, keys, actor="someone-else")
        view: RestoreJobView = await jobs.cancel(timeout_s=10)
        with pytest.raises(NoRestoreJobError):
            await jobs.cancel()
    assert view.state == "cancelled"
    assert fleet.calls[-1] == "cancel dl-000000000000"
    assert next(iter(fleet.downloads.values())).state == "cancelled"
    assert {m.model_id: m.step for m in view.models}["qwen"] == "cancelled"


async def test_no_job_before_the_first_restore(tmp_path: Path) -> None:
    async with fleet_at(tmp_path) as fleet:
        with pytest.raises(NoRestoreJobError):
            RestoreJobs(fleet).view()


async def test_a_node_that_cannot_say_gets_no_download_and_its_model_is_started(tmp_path: Path) -> None:
    document, keys = _backup(
        [model("qwen", auto_start=True, sources=[ModelSource(repo_id="a/b", folder="b")])]
    )
    async with fleet_at(tmp_path) as fleet, running(fleet) as jobs:
        jobs.start(document, [], actor="admin")
        view = await jobs.wait(timeout_s=10)
    assert [m.step for m in view.models] == ["started"]
    assert view.keys_added == []
    assert not any(call.startswith("download") for call in fleet.calls)
    assert keys  # the backup had keys; none were passed, so none were imported
