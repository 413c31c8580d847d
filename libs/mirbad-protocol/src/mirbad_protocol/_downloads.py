"""The download jobs of the agent contract: a request per source kind, a job with its progress.

A download names where a model comes from (a Hugging Face repository or an Ollama model) and the one
folder it lands in under a model root. The agent writes into a hidden temporary folder beside that
folder, verifies every file, and only then renames it into place, so a folder a model is read from is
always whole. A token sent with a request is stored by the agent and never appears in any answer.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Final, Literal

from pydantic import Field, field_validator

from ._wire import WireModel

__all__ = [
    "DOWNLOAD_STATES",
    "ROUTE_DOWNLOAD",
    "ROUTE_DOWNLOADS",
    "ROUTE_DOWNLOAD_CANCEL",
    "ROUTE_DOWNLOAD_RETRY",
    "ROUTE_DOWNLOAD_SIZE",
    "DownloadFile",
    "DownloadJob",
    "DownloadList",
    "DownloadRequest",
    "DownloadSize",
    "DownloadState",
    "HuggingFaceDownload",
    "OllamaDownload",
    "check_download_folder",
    "check_download_id",
]

ROUTE_DOWNLOADS: Final = "/downloads"
"""GET: :class:`DownloadList`; POST a :data:`DownloadRequest`: the new :class:`DownloadJob` (202)."""
ROUTE_DOWNLOAD: Final = "/downloads/{download_id}"
"""GET: the :class:`DownloadJob` with its progress; DELETE: forget a stopped job and its partial files."""
ROUTE_DOWNLOAD_CANCEL: Final = "/downloads/{download_id}/cancel"
"""POST (no body): stop a queued or running job; its partial files stay until DELETE."""
ROUTE_DOWNLOAD_RETRY: Final = "/downloads/{download_id}/retry"
"""POST (no body): run a failed or cancelled job again, from the verified bytes on disk."""
ROUTE_DOWNLOAD_SIZE: Final = "/downloads/size"
"""POST a :data:`DownloadRequest`: the :class:`DownloadSize` it would fetch (nothing is started)."""

DownloadState = Literal["queued", "running", "verifying", "completed", "failed", "cancelled"]
"""Where a job is: waiting for a slot, transferring, checking, done, or stopped (failed/cancelled)."""
DOWNLOAD_STATES: Final = ("queued", "running", "verifying", "completed", "failed", "cancelled")
"""Every :data:`DownloadState`, in the order a job goes through them."""

# Always used with fullmatch: "$" alone would let a trailing newline through.
_REPO_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
_REVISION: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,199}")
_OLLAMA_NAME: Final = re.compile(
    r"(?:[a-z0-9][a-z0-9._-]{0,79}/)?[a-z0-9][a-z0-9._-]{0,79}(?::[A-Za-z0-9][A-Za-z0-9._-]{0,127})?"
)
_DOWNLOAD_ID: Final = re.compile(r"dl-[0-9a-f]{12}")
_FOLDER_MAX: Final = 200


def check_download_id(download_id: str) -> str:
    """A job id as the agent makes them (``dl-`` and 12 hex digits).

    Raises:
        ValueError: anything else (a newline, ``..``, a slash ...).
    """
    if not _DOWNLOAD_ID.fullmatch(download_id):
        raise ValueError("must be a download id: 'dl-' and 12 lower-case hex digits")
    return download_id


def check_download_folder(folder: str) -> str:
    r"""The folder a download lands in: one plain name directly under a model root.

    Raises:
        ValueError: the name is empty, too long, has a ``/``, ``\\``, NUL or ``:``, is ``.``/``..``, or
            starts with ``.`` (the agent's temporary folders do).
    """
    if not folder or len(folder) > _FOLDER_MAX:
        raise ValueError(f"must be 1 to {_FOLDER_MAX} characters")
    if any(char in folder for char in "/\\\x00:"):
        raise ValueError("must be one folder name, without '/', '\\', ':' or NUL")
    if folder.startswith(".") or folder != folder.strip():
        raise ValueError("must not start with '.' (nor be '.' or '..') or with a space")
    return folder


class _DownloadBase(WireModel):
    folder: str
    root: Annotated[int, Field(ge=0)] = 0

    @field_validator("folder")
    @classmethod
    def _folder(cls, value: str) -> str:
        return check_download_folder(value)


class HuggingFaceDownload(_DownloadBase):
    """A Hugging Face repository (or the files of it that match ``allow_patterns``).

    Attributes:
        repo_id: ``owner/name``.
        revision: a branch, tag or commit; the job records the commit it resolved to.
        allow_patterns: glob patterns (``*.gguf``, ``tokenizer*``); empty takes every file.
        folder: the folder under the model root the files land in.
        root: the index of the model root.
        token: a Hugging Face token for a private or gated repository; stored owner-only by the agent
            for this job and never returned.
    """

    kind: Literal["huggingface"] = "huggingface"
    repo_id: str
    revision: str = "main"
    allow_patterns: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(default_factory=list)
    # Plain text on the wire: the master forwards it to the agent over mutual TLS. repr and str leave it
    # out, and no answer of the agent carries it.
    token: Annotated[str, Field(min_length=1, max_length=500)] | None = Field(default=None, repr=False)

    @field_validator("repo_id")
    @classmethod
    def _repo_id(cls, value: str) -> str:
        if not _REPO_ID.fullmatch(value) or ".." in value:
            raise ValueError("must be owner/name (letters, digits, '.', '_', '-')")
        return value

    @field_validator("revision")
    @classmethod
    def _revision(cls, value: str) -> str:
        if not _REVISION.fullmatch(value) or ".." in value:
            raise ValueError("must be a branch, tag or commit name")
        return value

    @property
    def source(self) -> str:
        """What the job downloads, for people: ``owner/name@revision``."""
        return f"{self.repo_id}@{self.revision}"


class OllamaDownload(_DownloadBase):
    """An Ollama model: ``name[:tag]`` (``library/`` is implied for a name without a namespace).

    Attributes:
        model: ``qwen3:0.6b``, ``library/qwen3``, ``user/model:tag``; the tag defaults to ``latest``.
        folder: the folder under the model root the GGUF (``model.gguf``) and its template and
            parameters land in.
        root: the index of the model root.
    """

    kind: Literal["ollama"] = "ollama"
    model: str

    @field_validator("model")
    @classmethod
    def _model(cls, value: str) -> str:
        if not _OLLAMA_NAME.fullmatch(value) or ".." in value:
            raise ValueError("must be name[:tag] or namespace/name[:tag] (lower-case name)")
        return value

    @property
    def source(self) -> str:
        """What the job downloads, for people: ``namespace/name:tag``."""
        name, _, tag = self.model.partition(":")
        return f"{name if '/' in name else 'library/' + name}:{tag or 'latest'}"


DownloadRequest = Annotated[HuggingFaceDownload | OllamaDownload, Field(discriminator="kind")]
"""The body of a POST to :data:`ROUTE_DOWNLOADS`, told apart by ``kind``."""


class DownloadSize(WireModel):
    """What a download request would fetch, as its source lists it now (:data:`ROUTE_DOWNLOAD_SIZE`).

    Attributes:
        revision: the commit (Hugging Face) or manifest digest (Ollama) the request resolves to.
        total_bytes: the size of every file it selects.
        file_count: how many files that is.
    """

    revision: str
    total_bytes: Annotated[int, Field(ge=0)]
    file_count: Annotated[int, Field(ge=0)]


class DownloadFile(WireModel):
    """One file of a job.

    Attributes:
        path: its path inside the job's folder (``/`` between segments).
        size_bytes: its size as the source announced it.
        done_bytes: how much of it is on disk.
        sha256: the digest it is verified against (LFS files and Ollama blobs).
        git_sha1: the git blob id it is verified against (Hugging Face files outside LFS).
    """

    path: str
    size_bytes: int
    done_bytes: int = 0
    sha256: str | None = None
    git_sha1: str | None = None


class DownloadJob(WireModel):
    """A download job and its progress.

    Attributes:
        id: the job's id.
        kind: ``huggingface`` or ``ollama``.
        source: what it downloads (``owner/name@revision``, ``library/name:tag``).
        revision: the commit (Hugging Face) or manifest digest (Ollama) it resolved to.
        root: the model root index.
        folder: the folder it lands in under that root.
        state: where it is (:data:`DownloadState`).
        files: every file, with its progress.
        total_bytes: the size of all files.
        done_bytes: how much of it is on disk.
        bytes_per_second: the transfer rate since the job (re)started; None when not running.
        eta_seconds: the estimated time left at that rate; None when unknown.
        error: why it failed, for people.
        created_at: when it was started.
        updated_at: when its state last changed.
    """

    id: str
    kind: Literal["huggingface", "ollama"]
    source: str
    revision: str | None = None
    root: int = 0
    folder: str
    state: DownloadState = "queued"
    files: list[DownloadFile] = Field(default_factory=list)
    total_bytes: int = 0
    done_bytes: int = 0
    bytes_per_second: float | None = None
    eta_seconds: float | None = None
    error: str | None = None
    created_at: datetime
    updated_at: datetime

    def to_full_wire(self) -> dict[str, Any]:
        """Every field, defaults included, as the admin API shows a job (a queued one has its ``state``).

        The agent contract keeps :meth:`to_wire` (defaults omitted, as every agent wire model); the
        admin API's readers are people and scripts that expect each documented field.
        """
        return self.model_dump(mode="json", by_alias=True)


class DownloadList(WireModel):
    """The answer of GET :data:`ROUTE_DOWNLOADS`: every job the agent knows, newest first."""

    downloads: list[DownloadJob] = Field(default_factory=list)

    def to_full_wire(self) -> dict[str, Any]:
        """Every job with every field (see :meth:`DownloadJob.to_full_wire`)."""
        return {"downloads": [job.to_full_wire() for job in self.downloads]}
