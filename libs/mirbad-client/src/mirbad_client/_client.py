"""A typed client of the master's admin API for scripts and notebooks (blocking; see also the async one).

Refusals come back as :mod:`mirbad_client.exceptions`, one class per error code (``NoSuchModelError``,
``AdmissionRefusedError``, ``NodeOfflineError`` ...; the table is in that module), and results as the
admin API's wire models (``mirbad_protocol``'s views), the same the master builds its answers with.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterable
from datetime import datetime, timedelta
from types import TracebackType
from typing import Self, TypeVar

import httpx

from mirbad_protocol import ModelDefinition
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
from mirbad_protocol.benchmarks import BenchmarkJobView, BenchmarkList
from mirbad_protocol.downloads import DownloadJob, HuggingFaceDownload, OllamaDownload
from mirbad_protocol.releases import ImagePull, NodeReleases, ReleasesView
from mirbad_protocol.restore import RestoreJobView, RestorePreview
from mirbad_protocol.tuning import TuningGoal, TuningJobView, TuningList, TuningRequest, TuningSearch

from . import _calls as calls
from ._calls import (
    DEFAULT_ACTION_TIMEOUT_S,
    DEFAULT_TIMEOUT_S,
    AdminCall,
    ClientOptions,
    finish,
    refuse,
)
from ._errors import connection_error
from ._streams import LogEvents, ReadyWait

__all__ = ["MirbadClient"]

_T = TypeVar("_T")


class MirbadClient:
    """The admin API of one master, one blocking call per route.

    Use it as a context manager (or call :meth:`close`) to release its connections::

        with MirbadClient("http://127.0.0.1:8080", password) as mirbad:
            mirbad.start("tiny")

    Args:
        base_url: the master's URL, as ``mirbad up`` prints it (without ``/api``).
        password: the administrator password.
        timeout: seconds a quick call may take.
        action_timeout: seconds a start, stop, restart or delete may take.
        transport: an httpx transport (tests, unix sockets); the network by default.

    Raises:
        AdminConnectionError: from every call, when the master cannot be reached or does not answer.
        AdminAuthError: from every call, when the password is refused.
    """

    def __init__(
        self,
        base_url: str,
        password: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        action_timeout: float = DEFAULT_ACTION_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._options = ClientOptions(base_url, password, timeout, action_timeout)
        self._http = httpx.Client(transport=transport, **self._options.http_options())

    @property
    def base_url(self) -> str:
        """The master's URL."""
        return self._options.base_url

    def close(self) -> None:
        """Close the connections to the master."""
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ------------------------------------------------------------ models

    def models(self, tags: Iterable[str] = ()) -> list[ModelView]:
        """Every model, or those carrying all of ``tags``."""
        return self._send(calls.models(tuple(tags)))

    def model(self, model_id: str) -> ModelView:
        """One model (raises ``NoSuchModelError``)."""
        return self._send(calls.model(model_id))

    def create_model(self, definition: ModelDefinition) -> ModelView:
        """Register a new model (``AdminApiError`` code ``model_exists`` when the id is taken)."""
        return self._send(calls.create_model(definition))

    def update_model(self, definition: ModelDefinition) -> ModelView:
        """Replace the saved definition of ``definition.id``; a running instance keeps running."""
        return self._send(calls.update_model(definition))

    def delete_model(self, model_id: str) -> None:
        """Stop a model and remove it."""
        self._send(calls.delete_model(model_id))

    def start(self, model_id: str, *, force: bool = False) -> ModelView:
        """Start a model; ``force`` skips the node's memory admission (``AdmissionRefusedError``)."""
        return self._send(calls.start(model_id, force))

    def stop(self, model_id: str) -> ModelView:
        """Stop a model."""
        return self._send(calls.stop(model_id))

    def restart(self, model_id: str, *, force: bool = False) -> ModelView:
        """Replace the running instance with one of the saved definition."""
        return self._send(calls.restart(model_id, force))

    def wait_ready(self, model_id: str, *, timeout: float = 300.0, interval: float = 0.5) -> ModelView:
        """Poll a started model until it is Ready and return its view.

        Raises:
            ModelFailedError: the model failed instead.
            TimeoutError: it was not Ready within ``timeout`` seconds.
        """
        wait = ReadyWait(model_id, timeout, interval)
        while not wait.done(view := self.model(model_id)):
            time.sleep(wait.pause())
        return view

    def logs(self, model_id: str, *, tail: int = 100) -> list[str]:
        """The model's last ``tail`` log lines, oldest first."""
        call = calls.logs(model_id, tail, follow=False)
        return list(self._events(call, self._options.timeout_for(call), max_lines=tail))

    def follow_logs(
        self, model_id: str, *, tail: int = 0, idle_timeout: float | None = None
    ) -> Generator[str, None, None]:
        """Yield the last ``tail`` log lines, then each new one, until the model exits.

        A running model's log has no end: break out of the loop when done (the generator closes the
        stream; ``contextlib.closing`` makes that explicit), or give ``idle_timeout``, the longest
        silence allowed (then ``AdminConnectionError``).

        Raises:
            LogFollowError: the master could not read the model's log any further.
        """
        call = calls.logs(model_id, tail, follow=True)
        return self._events(call, self._options.stream_timeout(idle_timeout))

    # ------------------------------------------------------------ fleet

    def benchmark(self, model_id: str, *, preset: str | None = None) -> BenchmarkJobView:
        """Start a benchmark of a Ready model with its current settings (no preset: the classic suite).

        Its node is in maintenance until the job ends: ``/v1`` refuses the node's models meanwhile.
        A second job on the node is refused with code ``job_conflict`` (the error's message names the
        running job), a model that is not Ready with ``model_not_ready``, an unknown preset with
        ``unknown_preset``.
        """
        return self._send(calls.benchmark(model_id, preset))

    def benchmarks(self, model_id: str) -> BenchmarkList:
        """A model's stored benchmark results, newest first, and the unreadable files skipped."""
        return self._send(calls.benchmarks(model_id))

    def benchmark_jobs(self) -> list[BenchmarkJobView]:
        """Each node's running benchmark job (else its last one), with its progress."""
        return (self._send(calls.benchmark_jobs())).jobs

    def cancel_benchmark(self, node_id: str | None = None) -> list[BenchmarkJobView]:
        """Cancel the running job of ``node_id`` (every running one without); returns them, ended."""
        return (self._send(calls.cancel_benchmark(node_id))).jobs

    def tune(
        self,
        model_id: str,
        *,
        goal: TuningGoal = "balanced",
        search: TuningSearch = "quick",
        steps: list[str] | None = None,
        preset: str | None = None,
    ) -> TuningJobView:
        """Start tuning a Ready model (its node is in maintenance until the run ends).

        ``preset`` (``interactive``, ``agents``, ``throughput``, ``long-documents``) runs the
        workload-preset search scored on it; without one the classic ``goal`` is tuned for.
        Refused with ``model_not_ready``, ``job_conflict`` (a benchmark or tuning job on the node),
        ``preset_not_for_model`` (a reranker or embedding model, or a preset for the other kind),
        ``unknown_preset`` or ``unknown_tuning_step``.
        """
        request = TuningRequest(goal=goal, search=search, steps=steps, preset=preset)
        return self._send(calls.tune(model_id, request))

    def tuning_runs(self, model_id: str) -> TuningList:
        """A model's stored tuning runs, newest first, with their files' names."""
        return self._send(calls.tuning_runs(model_id))

    def apply_tuning(self, model_id: str, run: str | None = None) -> ModelView:
        """Save a run's tuned settings (the newest run by default); the view says whether to restart."""
        return self._send(calls.apply_tuning(model_id, run))

    def tuning_jobs(self) -> list[TuningJobView]:
        """Each node's running tuning job (else its last one), with its progress."""
        return (self._send(calls.tuning_jobs())).jobs

    def cancel_tuning(self, node_id: str | None = None) -> list[TuningJobView]:
        """Cancel the running tuning job(s); the saved settings are restored; returns them, ended."""
        return (self._send(calls.cancel_tuning(node_id))).jobs

    def start_download(self, node_id: str, request: HuggingFaceDownload | OllamaDownload) -> DownloadJob:
        """Start downloading a model onto ``node_id`` (a Hugging Face repository or an Ollama model).

        A node without the kind's feature flag is refused with code ``feature_missing``; the agent's
        own refusals keep their codes (``source_not_found``, ``source_needs_token``,
        ``download_conflict``, ``insufficient_space``) and name the field.
        """
        return self._send(calls.start_download(node_id, request))

    def downloads(self, node_id: str) -> list[DownloadJob]:
        """The node's download jobs, newest first, with their progress."""
        return (self._send(calls.downloads(node_id))).downloads

    def download(self, node_id: str, download_id: str) -> DownloadJob:
        """One download job with its per-file and overall progress."""
        return self._send(calls.download(node_id, download_id))

    def cancel_download(self, node_id: str, download_id: str) -> DownloadJob:
        """Cancel a download job; its partial files stay until :meth:`remove_download`."""
        return self._send(calls.cancel_download(node_id, download_id))

    def retry_download(self, node_id: str, download_id: str) -> DownloadJob:
        """Run a failed or cancelled download job again, from the verified bytes on the node's disk."""
        return self._send(calls.retry_download(node_id, download_id))

    def remove_download(self, node_id: str, download_id: str) -> None:
        """Cancel a download job if it runs, delete its partial files and forget it."""
        self._send(calls.remove_download(node_id, download_id))

    def backups(self) -> BackupList:
        """The backups in the master's backup directory (newest first), the schedule, the last failure."""
        return self._send(calls.backups())

    def back_up_now(self, passphrase: str | None = None) -> BackupInfo:
        """Write a backup now; with ``passphrase`` (12 characters at least) its secrets are encrypted."""
        return self._send(calls.back_up_now(passphrase))

    def download_backup(self, name: str) -> bytes:
        """The backup file ``name`` byte for byte (to keep a copy off the master, say)."""
        return self._send(calls.download_backup(name))

    def preview_restore(self, backup: bytes, *, passphrase: str | None = None) -> RestorePreview:
        """What restoring ``backup`` (a backup file's bytes) would do; nothing changes.

        With ``passphrase`` the backup's API keys are read too (the keys a restore would add). A file that
        is not a backup, over 64 MiB, or a wrong passphrase is refused with code ``invalid_backup``.
        """
        return self._send(calls.preview_restore(backup, passphrase))

    def restore(self, backup: bytes, *, passphrase: str | None = None) -> RestoreJobView:
        """Start restoring ``backup`` (a backup file's bytes); follow it with :meth:`restore_job`.

        The job imports the models, the API keys (with ``passphrase``) and the host services, then
        downloads what is missing and starts what starts by itself. A restore while one runs is refused
        with code ``job_conflict``.
        """
        return self._send(calls.restore(backup, passphrase))

    def restore_job(self) -> RestoreJobView:
        """The running or last restore job, with each model's progress."""
        return self._send(calls.restore_job())

    def cancel_restore(self) -> RestoreJobView:
        """Cancel the running restore (the download in flight is stopped on its node); returns it, ended."""
        return self._send(calls.cancel_restore())

    def audit(
        self,
        *,
        actor: str | None = None,
        action: str | None = None,
        subject: str | None = None,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> AuditList:
        """A page of the audit log, newest first; pass the page's ``next`` as ``cursor`` for the older one.

        ``actor`` matches exactly, ``action`` exactly or as a dotted prefix (``model``), ``subject`` an
        entry's target or node; ``since`` is included and ``until`` excluded (a naive time is the local
        one). ``limit`` is 1 to 500 (50 by default). A time that does not parse, a limit out of range or a
        cursor the log did not give out is refused with code ``invalid_audit_query`` naming the field.
        """
        call = calls.audit(
            actor=actor, action=action, subject=subject, since=since, until=until, limit=limit, cursor=cursor
        )
        return self._send(call)

    def releases(self) -> ReleasesView:
        """The master's version and every agent's, with a warning where major.minor differs."""
        return self._send(calls.releases())

    def node_releases(self, node_id: str) -> NodeReleases:
        """The node's llama-server builds (with what ``--version`` says), vLLM images and pulls."""
        return self._send(calls.node_releases(node_id))

    def start_image_pull(self, node_id: str, image: str) -> ImagePull:
        """Start pulling ``image`` (``registry/name:tag``) on ``node_id``; follow it with :meth:`image_pull`.

        A reference that does not parse is refused with ``invalid_image_reference`` (422, field
        ``image``), a second pull of the same image while one runs with ``pull_conflict``.
        """
        return self._send(calls.start_image_pull(node_id, image))

    def image_pull(self, node_id: str, pull_id: str) -> ImagePull:
        """One image pull with its per-layer progress (``fraction`` is 0 to 1)."""
        return self._send(calls.image_pull(node_id, pull_id))

    def cancel_image_pull(self, node_id: str, pull_id: str) -> ImagePull:
        """Cancel a running image pull; the job as it was left."""
        return self._send(calls.cancel_image_pull(node_id, pull_id))

    def status(self) -> StatusReport:
        """The whole fleet: nodes with their memory, model statuses and metrics, router counters."""
        return self._send(calls.status())

    def nodes(self) -> list[NodeSummary]:
        """Every node with what the master last learned about it."""
        return self._send(calls.nodes())

    def node(self, node_id: str) -> NodeSummary:
        """One node (raises ``NoSuchNodeError``)."""
        return self._send(calls.node(node_id))

    def add_node(
        self, node_id: str, agent_url: str, *, name: str | None = None, labels: dict[str, str] | None = None
    ) -> NodeSummary:
        """Register an enrolled node whose agent answers at ``agent_url`` (``https://host:9443``).

        ``name`` is the name it enrolled with (its certificate's), ``node_id`` by default.
        """
        call = calls.add_node(node_id, name or node_id, agent_url, labels or {})
        return self._send(call)

    def remove_node(self, node_id: str) -> None:
        """Remove a node from the fleet (the local node stays: ``AdminApiError`` code ``local_node``)."""
        self._send(calls.remove_node(node_id))

    def enrollment_token(
        self,
        node_name: str,
        ttl: timedelta | float = 3600.0,
        *,
        address: str | None = None,
        agent_url: str | None = None,
        reenroll: bool = False,
    ) -> EnrollmentTokenIssued:
        """A one-time token for a new node (``ttl`` in seconds or a timedelta), with its enroll command.

        Args:
            node_name: the name the node's certificate will carry.
            ttl: how long the token may be used (once): 60 s to the API's maximum.
            address: the DNS name or IP address the master reaches the node's agent at: it goes into
                the command (``--san``), and the node is registered at ``https://{address}:9443``
                when it enrolls.
            agent_url: where the node's agent answers when not ``https://{address}:9443``
                (``https://host:port``); the node is registered there when it enrolls.
            reenroll: the name is an existing node's: its new certificate replaces the old one.

        Raises:
            InvalidFieldError: a field is unusable (``nodeName``, ``ttlSeconds``, ``address``,
                ``agentUrl``).
            NodeExistsError: the name is an existing node's and ``reenroll`` was not given.
        """
        return self._send(calls.enrollment_token(node_name, ttl, address, agent_url, reenroll))

    # ------------------------------------------------------------ API keys

    def keys(self) -> list[ApiKeyInfo]:
        """Every API key of ``/v1`` (never their secrets)."""
        return self._send(calls.keys())

    def key(self, key_id: str) -> ApiKeyInfo:
        """One key (raises ``NoSuchApiKeyError``)."""
        return self._send(calls.key(key_id))

    def create_key(self, request: ApiKeyCreate) -> ApiKeyCreated:
        """Create a key; its secret is in the answer and nowhere else, ever."""
        return self._send(calls.create_key(request))

    def revoke_key(self, key_id: str) -> ApiKeyInfo:
        """Revoke a key (its record and usage stay)."""
        return self._send(calls.revoke_key(key_id))

    def delete_key(self, key_id: str) -> None:
        """Delete a key and its usage."""
        self._send(calls.delete_key(key_id))

    def key_usage(self, key_id: str | None = None) -> list[KeyUsage]:
        """Tokens and requests per key and served name, or of one key."""
        return self._send(calls.key_usage(key_id))

    # ------------------------------------------------------------ plumbing

    def _send(self, call: AdminCall[_T]) -> _T:
        timeout = self._options.timeout_for(call)
        try:
            answer = self._http.request(call.method, call.path, timeout=timeout, **call.request_options())
        except httpx.HTTPError as exc:
            raise connection_error(self.base_url, exc) from exc
        return finish(call, answer)

    def _events(
        self, call: AdminCall[None], timeouts: httpx.Timeout, *, max_lines: int | None = None
    ) -> Generator[str, None, None]:
        headers = {"accept": calls.LOG_MEDIA_TYPE}
        try:
            with self._http.stream(
                call.method, call.path, params=call.params, headers=headers, timeout=timeouts
            ) as answer:
                if answer.is_error:
                    answer.read()
                    refuse(call, answer)
                yield from LogEvents(max_lines).read(answer.iter_lines())
        except httpx.HTTPError as exc:
            raise connection_error(self.base_url, exc) from exc
