"""What a download fetches: the files of a Hugging Face revision or of an Ollama manifest, with checks.

Hugging Face repository info goes through ``huggingface_hub`` (its endpoint argument reaches a mirror or
a local hub); the file bytes are fetched by :mod:`._transfer`. Ollama manifests are read with httpx:
the registry speaks the Docker distribution API with Ollama's own layer media types.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final
from urllib.parse import quote

import httpx

from mirbad_protocol.downloads import HuggingFaceDownload, OllamaDownload
from mirbad_runtime.exceptions import (
    DownloadRefusedError,
    SourceNeedsTokenError,
    SourceNotFoundError,
    SourceUnavailableError,
)

from ._digests import check_git_sha1, check_sha256
from ._network import NetworkLimits, read_capped

if TYPE_CHECKING:
    from huggingface_hub import ModelInfo

__all__ = [
    "OLLAMA_LAYER_FILES",
    "OLLAMA_MANIFEST_MEDIA_TYPE",
    "DownloadPlan",
    "PlannedFile",
    "check_file_path",
    "plan_huggingface",
    "plan_ollama",
]

OLLAMA_MANIFEST_MEDIA_TYPE: Final = "application/vnd.docker.distribution.manifest.v2+json"
"""The manifest media type an Ollama registry answers with."""
OLLAMA_LAYER_FILES: Final = {
    "application/vnd.ollama.image.model": "model.gguf",
    "application/vnd.ollama.image.template": "template",
    "application/vnd.ollama.image.params": "params",
    "application/vnd.ollama.image.system": "system",
    "application/vnd.ollama.image.license": "license",
}
"""The layers kept, by media type, and the file each lands as in the job's folder."""
_MODEL_LAYER: Final = "application/vnd.ollama.image.model"
_DIGEST: Final = re.compile(r"sha256:([0-9a-f]{64})")  # fullmatch: "$" lets a newline through
# Headers of the streamed answer that no longer describe the (decoded, complete) body handed on.
_ENCODING_HEADERS: Final = frozenset({"content-encoding", "content-length", "transfer-encoding"})


@dataclass(frozen=True)
class PlannedFile:
    """One file to fetch.

    Attributes:
        path: its path inside the job's folder (``/`` separated, checked by :func:`check_file_path`).
        url: where its bytes are.
        size: the size the source announced.
        sha256: the digest to verify (LFS files, Ollama blobs).
        git_sha1: the git blob id to verify (Hugging Face files outside LFS), when there is no sha256.
    """

    path: str
    url: str
    size: int
    sha256: str | None = None
    git_sha1: str | None = None


@dataclass(frozen=True)
class DownloadPlan:
    """The resolved revision (a commit, a manifest digest) and the files it has."""

    revision: str
    files: tuple[PlannedFile, ...]


def check_file_path(path: str) -> str:
    """A file path from a hub or manifest, if it stays inside the job's folder.

    Raises:
        DownloadRefusedError: an absolute path, a ``..``/``.``/empty segment, a backslash or NUL.
    """
    parts = path.split("/")
    if (
        not path
        or "\\" in path
        or "\x00" in path
        or any(part in ("", ".", "..") for part in parts)
        or re.match(r"^[A-Za-z]:", path)
    ):
        raise DownloadRefusedError(
            "files", f"the source names a file path the agent will not write: {path!r}"
        )
    return path


async def plan_huggingface(
    request: HuggingFaceDownload, endpoint: str, token: str | None, limits: NetworkLimits | None = None
) -> DownloadPlan:
    """The files of ``request``'s revision that its allow patterns select, with their sizes and digests.

    The repository info is read on the event loop (huggingface_hub's async session, with ``limits``'
    connect and read timeouts and size cap), so a silent hub holds no worker thread and the caller's
    deadline can cancel it.

    Raises:
        SourceNotFoundError: no such repository (``repoId``) or revision (``revision``), or no file matches
            (``allowPatterns``).
        SourceNeedsTokenError: the hub refused without a token, or refused the token given.
        SourceUnavailableError: the hub could not be reached (refused, DNS, TLS, timeout), failed (5xx),
            or answered with something that is not repository info.
    """
    # Imported here, not at the top: huggingface_hub (with yaml, tqdm and filelock) is ~16 MB of an idle
    # agent's memory, and an agent that never plans a download never needs it.
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    # Documented as public in huggingface_hub.utils, though its __init__ does not list it for type checkers.
    from huggingface_hub.utils import filter_repo_objects  # type: ignore[attr-defined]

    limits = limits or NetworkLimits()
    try:
        info = await _hf_model_info(request, endpoint, token, limits)
    except RevisionNotFoundError:
        raise SourceNotFoundError(
            "revision", f"{request.repo_id} has no revision {request.revision!r}"
        ) from None
    except GatedRepoError:
        raise SourceNeedsTokenError(
            f"{request.repo_id} is gated: this repository needs a token of an account granted access"
        ) from None
    except RepositoryNotFoundError as exc:
        raise _repository_error(request, token, exc.response.status_code) from None
    except HfHubHTTPError as exc:
        status = exc.response.status_code
        if status in (401, 403):
            raise _repository_error(request, token, status) from None
        raise SourceUnavailableError(
            f"the hub at {endpoint} answered {status} for {request.repo_id}"
        ) from None
    if not info.sha:
        raise SourceUnavailableError(f"the hub did not name the commit of {request.source}")
    siblings = list(
        filter_repo_objects(
            info.siblings or [], allow_patterns=request.allow_patterns or None, key=lambda s: s.rfilename
        )
    )
    if not siblings:
        raise SourceNotFoundError("allowPatterns", f"no file of {request.source} matches the allow patterns")
    files = tuple(_hf_file(request.repo_id, info.sha, endpoint, sibling) for sibling in siblings)
    return DownloadPlan(revision=info.sha, files=files)


async def _hf_model_info(
    request: HuggingFaceDownload, endpoint: str, token: str | None, limits: NetworkLimits
) -> ModelInfo:
    # huggingface_hub 2.x talks through httpx2 (its own fork of httpx): its errors are httpx2's, not
    # httpx's, and its shared client has no timeout, so the call is made here with bounds of our own.
    import httpx2
    from huggingface_hub import ModelInfo

    # Public in huggingface_hub.utils (its lazy __init__ lists them), unseen by type checkers.
    from huggingface_hub.utils import (  # type: ignore[attr-defined]
        build_hf_headers,
        get_async_session,
        hf_raise_for_status,
    )

    url = f"{endpoint}/api/models/{request.repo_id}/revision/{quote(request.revision, safe='')}"
    timeout = httpx2.Timeout(
        limits.read_timeout_s, connect=limits.connect_timeout_s, pool=limits.connect_timeout_s
    )
    headers = build_hf_headers(token=token if token else False)
    try:
        async with (
            get_async_session() as client,
            client.stream("GET", url, params={"blobs": True}, headers=headers, timeout=timeout) as streamed,
        ):
            body = await read_capped(streamed.aiter_bytes(), limits.max_info_bytes, "the repository info")
            # A complete answer (decoded already) for huggingface_hub's own reading of the status.
            response = httpx2.Response(
                streamed.status_code,
                headers=[(k, v) for k, v in streamed.headers.items() if k not in _ENCODING_HEADERS],
                content=body,
                request=streamed.request,
            )
    except (httpx2.HTTPError, OSError) as exc:
        raise SourceUnavailableError(f"cannot reach the hub at {endpoint}: {_describe(exc)}") from None
    hf_raise_for_status(response)
    try:
        return ModelInfo(**json.loads(body))  # type: ignore[no-untyped-call]
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise SourceUnavailableError(
            f"the hub at {endpoint} sent unreadable repository info: {exc}"
        ) from None


def _describe(exc: BaseException) -> str:
    # Some transport errors (a refused connection, a timeout) carry an empty message.
    return str(exc) or type(exc).__name__


def _repository_error(request: HuggingFaceDownload, token: str | None, status: int) -> Exception:
    if status in (401, 403):
        if token:
            return SourceNeedsTokenError(f"the hub refused the token for {request.repo_id}")
        # The real hub answers 401 alike for a private repository and a missing one when asked anonymously.
        return SourceNeedsTokenError(
            f"this repository needs a token: {request.repo_id} is private (or does not exist)"
        )
    return SourceNotFoundError("repoId", f"the hub has no repository {request.repo_id}")


def _hf_file(repo_id: str, commit: str, endpoint: str, sibling: object) -> PlannedFile:
    from huggingface_hub import hf_hub_url  # loaded by plan_huggingface already; see there

    name = check_file_path(str(getattr(sibling, "rfilename", "")))
    lfs = getattr(sibling, "lfs", None)
    size = getattr(lfs, "size", None) if lfs is not None else getattr(sibling, "size", None)
    if not isinstance(size, int) or size < 0:
        raise SourceUnavailableError(f"the hub did not give the size of {name}")
    # Every file is verified: LFS files by their sha256, the others by the git blob id the hub announces.
    sha256 = git_sha1 = None
    if lfs is not None:
        sha256 = check_sha256(getattr(lfs, "sha256", None))
        if sha256 is None:
            raise SourceUnavailableError(f"the hub gave no valid sha256 for {name}")
    else:
        git_sha1 = check_git_sha1(getattr(sibling, "blob_id", None))
        if git_sha1 is None:
            raise SourceUnavailableError(f"the hub gave no valid git blob id for {name}")
    url = hf_hub_url(repo_id, name, revision=commit, endpoint=endpoint)
    return PlannedFile(path=name, url=url, size=size, sha256=sha256, git_sha1=git_sha1)


async def plan_ollama(
    request: OllamaDownload, registry: str, http: httpx.AsyncClient, limits: NetworkLimits | None = None
) -> DownloadPlan:
    """The model, template and parameter layers of ``request``'s manifest.

    Raises:
        SourceNotFoundError: the registry has no such model or tag (``model``), or its manifest has no
            GGUF model layer.
        SourceUnavailableError: the registry could not be reached, failed, or sent a bad or oversized
            manifest.
    """
    limits = limits or NetworkLimits()
    name, tag = request.source.rsplit(":", 1)
    base = registry.rstrip("/")
    try:
        async with http.stream(
            "GET",
            f"{base}/v2/{name}/manifests/{tag}",
            headers={"Accept": OLLAMA_MANIFEST_MEDIA_TYPE},
            follow_redirects=True,
            timeout=limits.timeout(),
        ) as streamed:
            body = await read_capped(streamed.aiter_bytes(), limits.max_info_bytes, "the manifest")
            response = httpx.Response(streamed.status_code, content=body)
    except (httpx.HTTPError, OSError) as exc:
        raise SourceUnavailableError(f"cannot reach the registry at {registry}: {_describe(exc)}") from None
    if response.status_code == 404:
        raise SourceNotFoundError("model", f"the registry has no {request.source}")
    if response.status_code != 200:
        raise SourceUnavailableError(f"the registry answered {response.status_code} for {request.source}")
    try:
        layers = response.json()["layers"]
        files = tuple(
            _ollama_file(base, name, layer) for layer in layers if layer["mediaType"] in OLLAMA_LAYER_FILES
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise SourceUnavailableError(f"the manifest of {request.source} is not readable: {exc}") from None
    if sum(1 for item in files if item.path == OLLAMA_LAYER_FILES[_MODEL_LAYER]) != 1:
        raise SourceNotFoundError("model", f"{request.source} has no single GGUF model layer")
    if len({item.path for item in files}) != len(files):
        raise SourceUnavailableError(f"the manifest of {request.source} repeats a layer kind")
    return DownloadPlan(revision="sha256:" + hashlib.sha256(response.content).hexdigest(), files=files)


def _ollama_file(base: str, name: str, layer: dict[str, object]) -> PlannedFile:
    digest, size = layer["digest"], layer["size"]
    match = _DIGEST.fullmatch(digest) if isinstance(digest, str) else None
    if match is None or not isinstance(size, int) or size < 0:
        raise ValueError(f"a layer with digest {digest!r} and size {size!r}")
    path = OLLAMA_LAYER_FILES[str(layer["mediaType"])]
    return PlannedFile(path=path, url=f"{base}/v2/{name}/blobs/{digest}", size=size, sha256=match.group(1))
