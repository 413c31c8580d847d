"""The admin API's requests and answers without any I/O, shared by the sync and the async client.

Each route is an :class:`AdminCall`: what to send, which id a 404 is about and how to read the answer.
:func:`finish` turns an answer into the typed result or raises the client's exception for it (see
``_errors``); ``_streams`` reads the log stream and waits for Ready. The two clients only
send calls, so they cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final, Generic, TypeVar
from urllib.parse import quote

import httpx

from mirbad_protocol import ModelDefinition, WireModel
from mirbad_protocol.admin import (
    ApiKeyCreate,
    ApiKeyCreated,
    ApiKeyInfo,
    AuditList,
    BackupInfo,
    BackupList,
    EnrollmentTokenIssued,
    KeyUsage,
    ModelView,
    NodeSummary,
    StatusReport,
)
from mirbad_protocol.benchmarks import BenchmarkJobList, BenchmarkJobView, BenchmarkList
from mirbad_protocol.downloads import DownloadJob, DownloadList, HuggingFaceDownload, OllamaDownload
from mirbad_protocol.releases import ImagePull, NodeReleases, ReleasesView
from mirbad_protocol.restore import BACKUP_PASSPHRASE_HEADER, RestoreJobView, RestorePreview
from mirbad_protocol.tuning import TuningJobList, TuningJobView, TuningList, TuningRequest

from ._errors import admin_error, read_refusal
from .exceptions import AdminApiError

# Internal to the admin API's clients; not part of the public API.
__all__: list[str] = []

_T = TypeVar("_T")
_W = TypeVar("_W", bound=WireModel)
API: Final = "/api"
LOG_MEDIA_TYPE: Final = "text/event-stream"
DEFAULT_TIMEOUT_S: Final = 30.0
"""Seconds a quick call to the admin API may take."""
DEFAULT_ACTION_TIMEOUT_S: Final = 1800.0
"""Seconds a start, stop, restart or delete may take (a node may pull a container image first)."""


@dataclass(frozen=True)
class AdminCall(Generic[_T]):
    """One request to the admin API and how to read its answer.

    Attributes:
        method: the HTTP method.
        path: the path below the master's base URL (ids percent-encoded).
        read: the answer's body (decoded JSON, ``None`` when empty) to the result.
        params: the query.
        body: the JSON body, if any.
        subject: the id the request is about, for the exception of a 404.
        waits: whether the master may wait on a node before answering (start, stop, restart,
            delete), so the client's longer ``action_timeout`` applies.
        raw: ``read`` gets the body's bytes as sent, not its JSON (a backup file, kept byte for byte).
        content: raw bytes sent as the body instead of ``body`` (a backup, exactly as written).
        headers: more request headers.
    """

    method: str
    path: str
    read: Callable[[Any], _T]
    params: tuple[tuple[str, str], ...] = ()
    body: Any = None
    subject: str = ""
    waits: bool = False
    raw: bool = False
    content: bytes | None = field(default=None, repr=False)
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def request_options(self) -> dict[str, Any]:
        """Keyword arguments of ``httpx`` ``request`` for this call (besides method, path and timeout)."""
        if self.content is not None:
            return {"params": self.params, "content": self.content, "headers": dict(self.headers)}
        return {"params": self.params, "json": self.body, "headers": dict(self.headers) or None}


@dataclass(frozen=True)
class ClientOptions:
    """What both clients configure their httpx client with, and the timeout of each call.

    Attributes:
        base_url: the master's URL (``http://127.0.0.1:8080``), without ``/api``.
        password: the administrator password, sent as ``Authorization: Bearer``.
        timeout: seconds for a quick call.
        action_timeout: seconds for a call that may wait on a node (start, stop, restart, delete).
    """

    base_url: str
    password: str = field(repr=False)
    timeout: float
    action_timeout: float

    def http_options(self) -> dict[str, Any]:
        """Keyword arguments of ``httpx.Client`` / ``httpx.AsyncClient`` (besides the transport)."""
        return {
            "base_url": self.base_url.rstrip("/"),
            "headers": {"authorization": f"Bearer {self.password}"},
            "timeout": self.timeout,
            "follow_redirects": False,
        }

    def timeout_for(self, call: AdminCall[Any]) -> httpx.Timeout:
        """The timeout of ``call``."""
        return httpx.Timeout(self.action_timeout if call.waits else self.timeout, connect=self.timeout)

    def stream_timeout(self, idle_timeout: float | None) -> httpx.Timeout:
        """The timeout of a followed log: only the wait for the next line may be unbounded."""
        bounded = self.timeout
        return httpx.Timeout(connect=bounded, read=idle_timeout, write=bounded, pool=bounded)


def refuse(call: AdminCall[Any], answer: httpx.Response) -> None:
    """Raise the exception an error answer (body read) stands for; do nothing for a success."""
    if answer.is_error:
        raise admin_error(read_refusal(answer, call.subject))


def finish(call: AdminCall[_T], answer: httpx.Response) -> _T:
    """The result of ``call`` from its ``answer`` (body read), or the exception the answer stands for."""
    refuse(call, answer)
    if call.raw:
        return call.read(answer.content)
    try:
        return call.read(answer.json() if answer.content else None)
    except ValueError as exc:  # not JSON, or JSON outside the contract (InvalidFieldError too)
        message = f"{call.method} {call.path}: the admin API answered outside its contract: {exc}"
        raise AdminApiError(answer.status_code, None, message) from None


def _one(model: type[_W]) -> Callable[[Any], _W]:
    return model.from_wire


def _many(model: type[_W]) -> Callable[[Any], list[_W]]:
    def read(data: Any) -> list[_W]:
        if not isinstance(data, list):
            raise ValueError(f"expected a JSON array of {model.__name__}")
        return [model.from_wire(item) for item in data]

    return read


def _nothing(data: Any) -> None:
    return None


def _model_path(model_id: str, action: str = "") -> str:
    return f"{API}/models/{quote(model_id, safe='')}{action}"


def _flag(value: bool) -> tuple[tuple[str, str], ...]:
    return (("force", "true"),) if value else ()


# ------------------------------------------------------------------ models


def models(tags: tuple[str, ...]) -> AdminCall[list[ModelView]]:
    """``GET /api/models``: the models carrying every tag of ``tags``."""
    return AdminCall("GET", f"{API}/models", _many(ModelView), params=tuple(("tag", tag) for tag in tags))


def model(model_id: str) -> AdminCall[ModelView]:
    """``GET /api/models/{id}``."""
    return AdminCall("GET", _model_path(model_id), _one(ModelView), subject=model_id)


def create_model(definition: ModelDefinition) -> AdminCall[ModelView]:
    """``POST /api/models``."""
    body = definition.to_wire()
    return AdminCall("POST", f"{API}/models", _one(ModelView), body=body, subject=definition.id)


def update_model(definition: ModelDefinition) -> AdminCall[ModelView]:
    """``PUT /api/models/{id}``."""
    body = definition.to_wire()
    return AdminCall("PUT", _model_path(definition.id), _one(ModelView), body=body, subject=definition.id)


def delete_model(model_id: str) -> AdminCall[None]:
    """``DELETE /api/models/{id}`` (the master stops it first)."""
    return AdminCall("DELETE", _model_path(model_id), _nothing, subject=model_id, waits=True)


def start(model_id: str, force: bool) -> AdminCall[ModelView]:
    """``POST /api/models/{id}/start[?force=true]``."""
    path = _model_path(model_id, "/start")
    return AdminCall("POST", path, _one(ModelView), params=_flag(force), subject=model_id, waits=True)


def stop(model_id: str) -> AdminCall[ModelView]:
    """``POST /api/models/{id}/stop``."""
    return AdminCall("POST", _model_path(model_id, "/stop"), _one(ModelView), subject=model_id, waits=True)


def restart(model_id: str, force: bool) -> AdminCall[ModelView]:
    """``POST /api/models/{id}/restart[?force=true]``."""
    path = _model_path(model_id, "/restart")
    return AdminCall("POST", path, _one(ModelView), params=_flag(force), subject=model_id, waits=True)


def logs(model_id: str, tail: int, *, follow: bool) -> AdminCall[None]:
    """``GET /api/models/{id}/logs?tail=N``: server-sent events, read with :class:`LogEvents`."""
    params = (("tail", str(tail)),) + (() if follow else (("follow", "false"),))
    return AdminCall("GET", _model_path(model_id, "/logs"), _nothing, params=params, subject=model_id)


# ------------------------------------------------------------------ benchmarks


def benchmark(model_id: str, preset: str | None) -> AdminCall[BenchmarkJobView]:
    """``POST /api/models/{id}/benchmark[?preset=]``: start a job (202 with it)."""
    params = (("preset", preset),) if preset is not None else ()
    path = _model_path(model_id, "/benchmark")
    return AdminCall("POST", path, _one(BenchmarkJobView), params=params, subject=model_id)


def benchmarks(model_id: str) -> AdminCall[BenchmarkList]:
    """``GET /api/models/{id}/benchmarks``: the stored results, newest first."""
    return AdminCall("GET", _model_path(model_id, "/benchmarks"), _one(BenchmarkList), subject=model_id)


def benchmark_jobs() -> AdminCall[BenchmarkJobList]:
    """``GET /api/benchmark``: each node's running (else last) job."""
    return AdminCall("GET", f"{API}/benchmark", _one(BenchmarkJobList))


def cancel_benchmark(node_id: str | None) -> AdminCall[BenchmarkJobList]:
    """``DELETE /api/benchmark[?node=]``: cancel and wait until the jobs ended."""
    params = (("node", node_id),) if node_id is not None else ()
    return AdminCall("DELETE", f"{API}/benchmark", _one(BenchmarkJobList), params=params, waits=True)


def tune(model_id: str, request: TuningRequest) -> AdminCall[TuningJobView]:
    """``POST /api/models/{id}/tune``: start a tuning run (202 with its job)."""
    body = request.model_dump(mode="json", by_alias=True, exclude_none=True)
    return AdminCall("POST", _model_path(model_id, "/tune"), _one(TuningJobView), body=body, subject=model_id)


def tuning_runs(model_id: str) -> AdminCall[TuningList]:
    """``GET /api/models/{id}/tuning``: the stored runs, newest first."""
    return AdminCall("GET", _model_path(model_id, "/tuning"), _one(TuningList), subject=model_id)


def apply_tuning(model_id: str, run: str | None) -> AdminCall[ModelView]:
    """``POST /api/models/{id}/tuning/apply[?run=]``: save a run's tuned settings."""
    params = (("run", run),) if run is not None else ()
    path = _model_path(model_id, "/tuning/apply")
    return AdminCall("POST", path, _one(ModelView), params=params, subject=model_id)


def tuning_jobs() -> AdminCall[TuningJobList]:
    """``GET /api/tuning``: each node's running (else last) tuning job."""
    return AdminCall("GET", f"{API}/tuning", _one(TuningJobList))


def cancel_tuning(node_id: str | None) -> AdminCall[TuningJobList]:
    """``DELETE /api/tuning[?node=]``: cancel, restore and wait until the jobs ended."""
    params = (("node", node_id),) if node_id is not None else ()
    return AdminCall("DELETE", f"{API}/tuning", _one(TuningJobList), params=params, waits=True)


# ------------------------------------------------------------------ fleet


def status() -> AdminCall[StatusReport]:
    """``GET /api/status``."""
    return AdminCall("GET", f"{API}/status", _one(StatusReport))


def nodes() -> AdminCall[list[NodeSummary]]:
    """``GET /api/nodes``."""
    return AdminCall("GET", f"{API}/nodes", _many(NodeSummary))


def node(node_id: str) -> AdminCall[NodeSummary]:
    """``GET /api/nodes/{id}``."""
    return AdminCall("GET", f"{API}/nodes/{quote(node_id, safe='')}", _one(NodeSummary), subject=node_id)


def add_node(node_id: str, name: str, agent_url: str, labels: dict[str, str]) -> AdminCall[NodeSummary]:
    """``POST /api/nodes``: register an enrolled node (the master polls it before answering)."""
    body = {"id": node_id, "name": name, "agentUrl": agent_url, "labels": labels}
    return AdminCall("POST", f"{API}/nodes", _one(NodeSummary), body=body, subject=node_id, waits=True)


def remove_node(node_id: str) -> AdminCall[None]:
    """``DELETE /api/nodes/{id}``."""
    return AdminCall("DELETE", f"{API}/nodes/{quote(node_id, safe='')}", _nothing, subject=node_id)


def enrollment_token(
    node_name: str,
    ttl: timedelta | float,
    address: str | None,
    agent_url: str | None = None,
    reenroll: bool = False,
) -> AdminCall[EnrollmentTokenIssued]:
    """``POST /api/nodes/enrollment-tokens``."""
    seconds = ttl.total_seconds() if isinstance(ttl, timedelta) else ttl
    body: dict[str, Any] = {"nodeName": node_name, "ttlSeconds": round(seconds)}
    if address is not None:
        body["address"] = address
    if agent_url is not None:
        body["agentUrl"] = agent_url
    if reenroll:
        body["reenroll"] = True
    return AdminCall("POST", f"{API}/nodes/enrollment-tokens", _one(EnrollmentTokenIssued), body=body)


# ------------------------------------------------------------------ downloads


def _downloads_path(node_id: str, download_id: str = "") -> str:
    tail = f"/{quote(download_id, safe='')}" if download_id else ""
    return f"{API}/nodes/{quote(node_id, safe='')}/downloads{tail}"


def start_download(node_id: str, request: HuggingFaceDownload | OllamaDownload) -> AdminCall[DownloadJob]:
    """``POST /api/nodes/{id}/downloads``: start a job (202 with it; the token is never returned)."""
    body = request.to_wire()
    path = _downloads_path(node_id)
    return AdminCall("POST", path, _one(DownloadJob), body=body, subject=node_id, waits=True)


def downloads(node_id: str) -> AdminCall[DownloadList]:
    """``GET /api/nodes/{id}/downloads``: the node's jobs, newest first, with their progress."""
    return AdminCall("GET", _downloads_path(node_id), _one(DownloadList), subject=node_id)


def download(node_id: str, download_id: str) -> AdminCall[DownloadJob]:
    """``GET /api/nodes/{id}/downloads/{download}``."""
    return AdminCall("GET", _downloads_path(node_id, download_id), _one(DownloadJob), subject=node_id)


def cancel_download(node_id: str, download_id: str) -> AdminCall[DownloadJob]:
    """``DELETE /api/nodes/{id}/downloads/{download}``: cancel; its partial files stay."""
    path = _downloads_path(node_id, download_id)
    return AdminCall("DELETE", path, _one(DownloadJob), subject=node_id)


def retry_download(node_id: str, download_id: str) -> AdminCall[DownloadJob]:
    """``POST /api/nodes/{id}/downloads/{download}/retry``: run a failed or cancelled job again."""
    path = _downloads_path(node_id, download_id) + "/retry"
    return AdminCall("POST", path, _one(DownloadJob), subject=node_id)


def remove_download(node_id: str, download_id: str) -> AdminCall[None]:
    """``DELETE /api/nodes/{id}/downloads/{download}?remove=true``: cancel, delete the partial files."""
    path = _downloads_path(node_id, download_id)
    return AdminCall("DELETE", path, _nothing, params=(("remove", "true"),), subject=node_id)


# ------------------------------------------------------------------ backups


def backups() -> AdminCall[BackupList]:
    """``GET /api/backup``: the backups in the backup directory, the schedule, the last failure."""
    return AdminCall("GET", f"{API}/backup", _one(BackupList))


def back_up_now(passphrase: str | None) -> AdminCall[BackupInfo]:
    """``POST /api/backup``: write a backup now (201), its secrets encrypted with ``passphrase``."""
    body = {"passphrase": passphrase} if passphrase is not None else {}
    return AdminCall("POST", f"{API}/backup", _one(BackupInfo), body=body, waits=True)


def download_backup(name: str) -> AdminCall[bytes]:
    """``GET /api/backup/files/{name}``: one backup file, byte for byte."""
    return AdminCall("GET", f"{API}/backup/files/{quote(name, safe='')}", bytes, subject=name, raw=True)


# ------------------------------------------------------------------ audit


def audit(
    *,
    actor: str | None,
    action: str | None,
    subject: str | None,
    since: datetime | str | None,
    until: datetime | str | None,
    limit: int | None,
    cursor: str | None,
) -> AdminCall[AuditList]:
    """``GET /api/audit``: a page of the audit log, newest first (``next`` is the older page's cursor)."""
    given = {"actor": actor, "action": action, "subject": subject, "since": since, "until": until}
    params = [(name, _time_text(value)) for name, value in given.items() if value is not None]
    params += [
        (name, str(value)) for name, value in (("limit", limit), ("cursor", cursor)) if value is not None
    ]
    return AdminCall("GET", f"{API}/audit", _one(AuditList), params=tuple(params))


def _time_text(value: datetime | str) -> str:
    # A naive time would be read as UTC by the master; the caller's own zone is the likelier meaning.
    return value.astimezone().isoformat() if isinstance(value, datetime) else value


# ------------------------------------------------------------------ releases


def _pulls_path(node_id: str, pull_id: str = "") -> str:
    tail = f"/{quote(pull_id, safe='')}" if pull_id else ""
    return f"{API}/nodes/{quote(node_id, safe='')}/image-pulls{tail}"


def releases() -> AdminCall[ReleasesView]:
    """``GET /api/releases``: the master's version and every agent's, with skew warnings."""
    return AdminCall("GET", f"{API}/releases", _one(ReleasesView))


def node_releases(node_id: str) -> AdminCall[NodeReleases]:
    """``GET /api/nodes/{id}/releases``: the node's llama-server builds, vLLM images and pulls."""
    path = f"{API}/nodes/{quote(node_id, safe='')}/releases"
    return AdminCall("GET", path, _one(NodeReleases), subject=node_id, waits=True)


def start_image_pull(node_id: str, image: str) -> AdminCall[ImagePull]:
    """``POST /api/nodes/{id}/image-pulls``: start pulling ``image`` (202 with the job)."""
    # Sent as typed: the master checks the reference and names the field when it does not parse.
    return AdminCall("POST", _pulls_path(node_id), _one(ImagePull), body={"image": image}, subject=node_id)


def image_pull(node_id: str, pull_id: str) -> AdminCall[ImagePull]:
    """``GET /api/nodes/{id}/image-pulls/{pull}``."""
    return AdminCall("GET", _pulls_path(node_id, pull_id), _one(ImagePull), subject=node_id)


def cancel_image_pull(node_id: str, pull_id: str) -> AdminCall[ImagePull]:
    """``DELETE /api/nodes/{id}/image-pulls/{pull}``: cancel a running pull."""
    return AdminCall("DELETE", _pulls_path(node_id, pull_id), _one(ImagePull), subject=node_id)


# ------------------------------------------------------------------ API keys


def keys() -> AdminCall[list[ApiKeyInfo]]:
    """``GET /api/keys``."""
    return AdminCall("GET", f"{API}/keys", _many(ApiKeyInfo))


def key(key_id: str) -> AdminCall[ApiKeyInfo]:
    """``GET /api/keys/{id}``."""
    return AdminCall("GET", f"{API}/keys/{quote(key_id, safe='')}", _one(ApiKeyInfo), subject=key_id)


def create_key(request: ApiKeyCreate) -> AdminCall[ApiKeyCreated]:
    """``POST /api/keys``."""
    return AdminCall("POST", f"{API}/keys", _one(ApiKeyCreated), body=request.to_wire())


def revoke_key(key_id: str) -> AdminCall[ApiKeyInfo]:
    """``POST /api/keys/{id}/revoke``."""
    path = f"{API}/keys/{quote(key_id, safe='')}/revoke"
    return AdminCall("POST", path, _one(ApiKeyInfo), subject=key_id)


def delete_key(key_id: str) -> AdminCall[None]:
    """``DELETE /api/keys/{id}``."""
    return AdminCall("DELETE", f"{API}/keys/{quote(key_id, safe='')}", _nothing, subject=key_id)


def key_usage(key_id: str | None) -> AdminCall[list[KeyUsage]]:
    """``GET /api/keys/usage[?keyId=]``."""
    params = (("keyId", key_id),) if key_id is not None else ()
    return AdminCall("GET", f"{API}/keys/usage", _many(KeyUsage), params=params, subject=key_id or "")


# ------------------------------------------------------------------ restore


def _backup_headers(passphrase: str | None) -> tuple[tuple[str, str], ...]:
    headers = [("content-type", "application/json")]
    if passphrase is not None:
        headers.append((BACKUP_PASSPHRASE_HEADER, passphrase))
    return tuple(headers)


def preview_restore(backup: bytes, passphrase: str | None = None) -> AdminCall[RestorePreview]:
    """``POST /api/restore/preview``: what restoring ``backup`` would do (nothing changes)."""
    headers = _backup_headers(passphrase)
    return AdminCall(
        "POST", f"{API}/restore/preview", RestorePreview.from_wire, content=backup, headers=headers
    )


def restore(backup: bytes, passphrase: str | None = None) -> AdminCall[RestoreJobView]:
    """``POST /api/restore``: start the restore job (202 with it)."""
    headers = _backup_headers(passphrase)
    return AdminCall("POST", f"{API}/restore", RestoreJobView.from_wire, content=backup, headers=headers)


def restore_job() -> AdminCall[RestoreJobView]:
    """``GET /api/restore``: the running or last restore job, with its progress."""
    return AdminCall("GET", f"{API}/restore", RestoreJobView.from_wire)


def cancel_restore() -> AdminCall[RestoreJobView]:
    """``DELETE /api/restore``: cancel the running restore; answers it, ended."""
    return AdminCall("DELETE", f"{API}/restore", RestoreJobView.from_wire, waits=True)
