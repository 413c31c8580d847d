"""Downloads against sources that misbehave: every failure a clear refusal, no answer read without end.

Issue 31 items 7 and 8: a hub that refuses, cannot be resolved, fails TLS, never answers or answers 5xx
gives the same ``SourceUnavailableError`` (the agent's 502 ``upstream_unreachable`` with the reason),
never an unexpected exception; repository info and manifests are read up to a cap; a drip-fed file
ends as a stalled, failed job and frees its slot.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests._support.model_hub import (
    REPO,
    Hold,
    Lies,
    Sources,
    refused_endpoint,
    silent_endpoint,
)
from tests._support.polling import eventually

from mirbad_protocol.downloads import DownloadJob, HuggingFaceDownload, OllamaDownload
from mirbad_runtime.downloads import (
    PARTIAL_SUFFIX,
    TEMP_PREFIX,
    DownloadManager,
    NetworkLimits,
    read_capped,
)
from mirbad_runtime.exceptions import DownloadError, SourceUnavailableError

pytestmark = pytest.mark.anyio

WAIT_S = 30.0
# Short bounds, so a silent or dripping source is given up on within a test's patience.
QUICK = NetworkLimits(
    connect_timeout_s=2.0,
    read_timeout_s=1.0,
    plan_timeout_s=3.0,
    max_info_bytes=256 * 1024,
    min_bytes_per_second=4096,
    rate_window_s=0.5,
)


async def _start(
    tmp_path: Path,
    hub: str,
    registry: str,
    request: HuggingFaceDownload | OllamaDownload,
    limits: NetworkLimits = QUICK,
) -> DownloadJob:
    (tmp_path / "models").mkdir(exist_ok=True)
    manager = DownloadManager(
        [tmp_path / "models"], tmp_path / "state", hf_endpoint=hub, ollama_registry=registry, limits=limits
    )
    outcome: DownloadJob | DownloadError | None = None
    async with anyio.create_task_group() as group:
        await group.start(manager.run)
        try:
            outcome = await manager.start(request)
        except DownloadError as exc:
            outcome = exc  # raised below, outside the task group (which would wrap it in a group)
        group.cancel_scope.cancel()
    if isinstance(outcome, DownloadError):
        raise outcome
    assert outcome is not None
    return outcome


def _request(kind: str, folder: str = "tiny") -> HuggingFaceDownload | OllamaDownload:
    if kind == "huggingface":
        return HuggingFaceDownload.model_validate({"repo_id": REPO, "folder": folder})
    return OllamaDownload.model_validate({"model": "tiny", "folder": folder})


def _tls_to_plain(url: str) -> str:
    # An https URL at a plain-HTTP server: the TLS handshake fails.
    return url.replace("http://", "https://")


@pytest.mark.parametrize("kind", ["huggingface", "ollama"])
@pytest.mark.parametrize("failure", ["refused", "dns", "tls", "silent", "5xx", "endless"])
async def test_every_way_a_source_fails_is_a_clear_refusal(
    tmp_path: Path, servers: Sources, kind: str, failure: str
) -> None:
    async with silent_endpoint() as silent:
        endpoint = {
            "refused": refused_endpoint(),
            "dns": "http://mirbad-no-such-host.invalid",
            "tls": _tls_to_plain(servers.hub_url if kind == "huggingface" else servers.registry_url),
            "silent": silent.url,
        }.get(failure, servers.hub_url if kind == "huggingface" else servers.registry_url)
        served = servers.hub if kind == "huggingface" else servers.registry
        served.lies = Lies(status=503) if failure == "5xx" else Lies(endless=failure == "endless")
        with pytest.raises(SourceUnavailableError) as raised:
            await _start(tmp_path, endpoint, endpoint, _request(kind))
    message = str(raised.value)
    assert message.strip()
    expected = {"5xx": "503", "endless": "larger than", "silent": "Timeout"}.get(failure, "cannot reach")
    assert expected in message


@pytest.mark.parametrize("kind", ["huggingface", "ollama"])
async def test_a_drip_fed_answer_ends_at_the_planning_deadline(
    tmp_path: Path, servers: Sources, kind: str
) -> None:
    served = servers.hub if kind == "huggingface" else servers.registry
    # A byte every 0.1 s never trips the read timeout; only the 2 s total deadline can end it.
    served.lies = Lies(drip_interval_s=0.1, drip_metadata=True)
    limits = NetworkLimits(read_timeout_s=60.0, plan_timeout_s=2.0)
    with pytest.raises(SourceUnavailableError, match=r"did not answer .* within 2 s"):
        await _start(tmp_path, servers.hub_url, servers.registry_url, _request(kind), limits)


async def test_a_drip_fed_file_stalls_the_job_which_fails_and_frees_its_slot(
    tmp_path: Path, servers: Sources
) -> None:
    (tmp_path / "models").mkdir()
    manager = DownloadManager(
        [tmp_path / "models"],
        tmp_path / "state",
        hf_endpoint=servers.hub_url,
        ollama_registry=servers.registry_url,
        max_concurrent=1,
        limits=QUICK,
    )
    async with anyio.create_task_group() as group:
        await group.start(manager.run)
        servers.registry.lies = Lies(drip_interval_s=0.05)  # 20 bytes/s, far below the floor
        dripping = await manager.start(_request("ollama"))
        # The hub is honest: its job waits for the one slot, which the stalled job must give back.
        honest = await manager.start(_request("huggingface", "honest"))
        await eventually(lambda: manager.get(honest.id).state in ("completed", "failed"), timeout_s=WAIT_S)
        group.cancel_scope.cancel()
    stalled = manager.get(dripping.id)
    assert stalled.state == "failed"
    assert "stalled" in (stalled.error or "")
    assert manager.get(honest.id).state == "completed"


async def test_a_start_still_resolving_its_source_ends_with_the_manager(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    refusals: list[DownloadError] = []
    async with silent_endpoint() as silent:
        manager = DownloadManager([tmp_path / "models"], tmp_path / "state", hf_endpoint=silent.url)

        async def start() -> None:
            try:
                await manager.start(_request("huggingface"))
            except DownloadError as exc:
                refusals.append(exc)

        async with anyio.create_task_group() as requests, anyio.create_task_group() as group:
            await group.start(manager.run)
            requests.start_soon(start)
            await eventually(lambda: silent.connections >= 1, timeout_s=WAIT_S)
            group.cancel_scope.cancel()  # the agent shuts down; the default 60 s deadline is far off
    assert [str(refusal) for refusal in refusals] == [
        "the download manager stopped while resolving the source"
    ]


async def test_a_source_that_ignores_the_range_restarts_the_file_and_it_verifies(
    tmp_path: Path, servers: Sources
) -> None:
    # The hash of the prefix on disk once outlived the restart, so the whole file failed its sha256.
    (tmp_path / "models").mkdir()
    servers.registry.hold = hold = Hold(_gguf_blob(servers), after_bytes=128 * 1024)

    def manager() -> DownloadManager:
        return DownloadManager(
            [tmp_path / "models"], tmp_path / "state", ollama_registry=servers.registry_url, limits=QUICK
        )

    async with anyio.create_task_group() as group:
        first = manager()
        await group.start(first.run)
        job = await first.start(_request("ollama"))
        with anyio.fail_after(WAIT_S):
            await hold.reached.wait()
        partial = tmp_path / "models" / f"{TEMP_PREFIX}{job.id}" / f"model.gguf{PARTIAL_SUFFIX}"
        await eventually(lambda: partial.is_file() and partial.stat().st_size > 0, timeout_s=WAIT_S)
        group.cancel_scope.cancel()  # the agent stops mid-file
    hold.release()
    servers.registry.lies = Lies(ignore_range=True)
    async with anyio.create_task_group() as group:
        second = manager()
        await group.start(second.run)
        await eventually(lambda: second.get(job.id).state in ("completed", "failed"), timeout_s=WAIT_S)
        group.cancel_scope.cancel()
    assert second.get(job.id).state == "completed", second.get(job.id).error
    assert (tmp_path / "models" / "tiny" / "model.gguf").read_bytes() == servers.gguf


def _gguf_blob(servers: Sources) -> str:
    return next(key for key, data in servers.registry.blobs.items() if data == servers.gguf)


@given(chunks=st.lists(st.binary(max_size=64), max_size=20), cap=st.integers(min_value=0, max_value=512))
def test_an_answer_is_read_whole_within_its_cap_and_refused_past_it(chunks: list[bytes], cap: int) -> None:
    async def source() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    async def read() -> bytes | str:
        try:
            return await read_capped(source(), cap, "the answer")
        except SourceUnavailableError as exc:
            return str(exc)

    whole = b"".join(chunks)
    expected = (
        whole if len(whole) <= cap else f"the answer is larger than {cap} bytes; the source is not trusted"
    )
    assert anyio.run(read) == expected
