"""Downloads in the portal: the search box that starts one, the panel that follows them, the editor's sources.

Every start and cancel goes through :mod:`mirbad_master._downloads`, the API's own path (the feature
check, the audit line; a token is forwarded and never shown again). Only nodes whose agent reports a
download feature flag are offered; the panel lists each such node's jobs with a progress bar per
file and overall, the rate and the ETA, and a Cancel (Forget, once stopped) button.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Final

from nicegui import ui

from mirbad_master import _downloads as downloads
from mirbad_master._composition import MasterServices
from mirbad_protocol import (
    DownloadJob,
    HuggingFaceDownload,
    InvalidFieldError,
    MirbadError,
    ModelDefinition,
    ModelSource,
    OllamaDownload,
    check_download_folder,
)

from ._marks import testid
from ._portal import Portal
from ._refusals import PORTAL_ACTOR as ACTOR

__all__ = [
    "PANEL_REFRESH_S",
    "SEARCH_LABEL",
    "default_folder",
    "download_nodes",
    "eta_text",
    "parse_download",
    "progress_percent",
    "rate_text",
    "render_download_box",
    "render_downloads_panel",
    "render_models_downloads",
    "render_nodes_downloads",
    "render_source_downloads",
]

PANEL_REFRESH_S: Final = 1.0
"""How often the panel reads the jobs again (their bytes move every second)."""
SEARCH_LABEL: Final = "a Hugging Face repo or an Ollama model"
"""The search box's label."""
_HF_URL: Final = re.compile(r"^https?://(?:www\.)?(?:huggingface\.co|hf\.co)/(?P<repo>[^/?#]+/[^/?#]+)")
_PREFIXES: Final = {"hf:": "huggingface", "huggingface:": "huggingface", "ollama:": "ollama"}
_UNITS: Final = ("B", "KB", "MB", "GB", "TB")


def _kind_and_name(text: str) -> tuple[str, str]:
    value = text.strip()
    for prefix, kind in _PREFIXES.items():
        if value.lower().startswith(prefix):
            return kind, value[len(prefix) :].strip()
    url = _HF_URL.match(value)
    if url is not None:
        return "huggingface", url["repo"]
    # owner/name is a Hugging Face repository; name[:tag] (or namespace/name:tag) an Ollama model.
    if "/" in value and ":" not in value:
        return "huggingface", value
    return "ollama", value


def default_folder(text: str) -> str:
    """The folder a download lands in unless one is named: the model's name, made one plain name."""
    kind, name = _kind_and_name(text)
    name = name.split("@", 1)[0]
    base = name.rsplit("/", 1)[-1] if kind == "huggingface" else name.removeprefix("library/")
    folder = re.sub(r"[^A-Za-z0-9._-]+", "-", base).strip("-.").lower()
    return folder or "model"


def parse_download(
    text: str, folder: str = "", *, patterns: str = "", token: str = ""
) -> HuggingFaceDownload | OllamaDownload:
    """The request the search box's text names.

    ``owner/name[@revision]`` (or a huggingface.co URL, or ``hf:owner/name``) is a Hugging Face
    repository; ``name[:tag]`` (or ``namespace/name:tag``, or ``ollama:…``) an Ollama model.

    Args:
        text: what was typed.
        folder: the target folder; empty: :func:`default_folder`.
        patterns: comma-separated glob patterns (Hugging Face only; empty takes every file).
        token: a Hugging Face token for a private or gated repository (empty: none).

    Raises:
        InvalidFieldError: a field the API would refuse (``repoId``, ``model``, ``folder`` ...).
    """
    if not text.strip():
        raise InvalidFieldError("source", f"name {SEARCH_LABEL}")
    kind, name = _kind_and_name(text)
    target = folder.strip() or default_folder(text)
    if kind == "huggingface":
        repo, _, revision = name.partition("@")
        body: dict[str, object] = {"kind": kind, "repoId": repo, "folder": target}
        if revision:
            body["revision"] = revision
        globs = [pattern.strip() for pattern in patterns.split(",") if pattern.strip()]
        if globs:
            body["allowPatterns"] = globs
        if token.strip():
            body["token"] = token.strip()
        return HuggingFaceDownload.from_user_input(body)
    return OllamaDownload.from_user_input({"kind": kind, "model": name, "folder": target})


def download_nodes(services: MasterServices) -> dict[str, list[str]]:
    """Each node whose agent offers downloads, with the kinds it offers (from the monitor's last read)."""
    offered: dict[str, list[str]] = {}
    for state in services.cache.nodes():
        kinds = downloads.download_kinds(state.info)
        if kinds:
            offered[state.node_id] = kinds
    return dict(sorted(offered.items()))


def progress_percent(done: int, total: int) -> int:
    """Whole percent done (100 only when all bytes are there; 0 for an empty total)."""
    if total <= 0:
        return 0
    return 100 if done >= total else min(int(done * 100 / total), 99)


def rate_text(bytes_per_second: float | None) -> str:
    """``12.3 MB/s``; an em dash when not running."""
    if bytes_per_second is None:
        return "—"
    return f"{_bytes(bytes_per_second)}/s"


def eta_text(seconds: float | None) -> str:
    """``ETA 1 h 02 min`` / ``ETA 42 s``; empty when unknown."""
    if seconds is None:
        return ""
    whole = round(seconds)
    if whole >= 3600:
        return f"ETA {whole // 3600} h {whole % 3600 // 60:02d} min"
    if whole >= 60:
        return f"ETA {whole // 60} min {whole % 60:02d} s"
    return f"ETA {whole} s"


def _bytes(value: float) -> str:
    amount = float(value)
    for unit in _UNITS:
        if amount < 1000 or unit == _UNITS[-1]:
            return f"{amount:.0f} {unit}" if unit == "B" else f"{amount:.1f} {unit}"
        amount /= 1000
    raise AssertionError("unreachable")


async def render_download_box(
    portal: Portal, on_started: Callable[[], Awaitable[None]] | None = None
) -> None:
    """The "Download" card: a source, a node offering downloads, a target folder; starts a job."""
    services = portal.services
    offered = download_nodes(services)
    card = testid(ui.card().classes("w-full gap-2"), "download-box")
    with card:
        ui.label("Download a model").classes("text-h6")
        if not offered:
            ui.label("No node offers downloads (its agent needs a model root).").classes("text-grey-7")
            return
        with ui.row().classes("w-full items-start gap-2"):
            source = testid(ui.input(SEARCH_LABEL).classes("grow min-w-[18rem]"), "download-source")
            node = testid(
                ui.select(list(offered), value=next(iter(offered)), label="Node").classes("w-40"),
                "download-node",
            )
            folder = testid(ui.input("Target folder").classes("w-56"), "download-folder")
        with ui.row().classes("w-full items-start gap-2"):
            patterns = ui.input("Files (Hugging Face: globs, comma-separated)").classes("grow")
            token = ui.input("Token (private repositories)", password=True).classes("w-72")
        fields = {"repoId": source, "model": source, "source": source, "folder": folder}

        def suggest() -> None:
            if not folder.value and source.value:
                folder.props(f'placeholder="{default_folder(str(source.value))}"')

        source.on_value_change(suggest)

        async def start() -> None:
            for element in (source, folder):
                element.error = None
            try:
                request = parse_download(
                    str(source.value or ""),
                    str(folder.value or ""),
                    patterns=str(patterns.value or ""),
                    token=str(token.value or ""),
                )
                job = await downloads.start_download(services, str(node.value), request, ACTOR)
            except InvalidFieldError as exc:
                fields.get(exc.field.split(".")[0], source).error = exc.reason
                return
            except MirbadError as exc:
                ui.notify(str(exc), type="negative", multi_line=True)
                return
            token.value = ""
            ui.notify(f"downloading {job.source} into {job.folder} on {node.value}", type="positive")
            if on_started is not None:
                await on_started()

        testid(ui.button("Download", icon="download", on_click=start), "download-start")


async def render_downloads_panel(portal: Portal, node_id: str | None = None) -> Callable[[], Awaitable[None]]:
    """The downloads panel: the jobs of ``node_id`` (every node offering downloads without), kept fresh.

    Returns:
        Its refresh, for a page that starts a download to show it at once.
    """
    services = portal.services
    card = testid(ui.card().classes("w-full gap-2"), f"downloads-{node_id}" if node_id else "downloads")
    with card:
        ui.label(f"Downloads on {node_id}" if node_id else "Downloads").classes("text-h6")
        body = ui.column().classes("w-full gap-2")

    async def act(action: Callable[[], Awaitable[object]], done: str) -> None:
        try:
            await action()
        except MirbadError as exc:
            ui.notify(str(exc), type="negative", multi_line=True)
            return
        ui.notify(done, type="positive")
        await refresh()

    async def refresh() -> None:
        nodes = [node_id] if node_id is not None else list(download_nodes(services))
        listed: list[tuple[str, list[DownloadJob] | str]] = []
        for node in nodes:
            try:
                listed.append((node, await downloads.node_downloads(services, node)))
            except MirbadError as exc:
                listed.append((node, str(exc)))
        body.clear()
        with body:
            if not any(isinstance(jobs, list) and jobs for _node, jobs in listed):
                ui.label("No downloads.").classes("text-grey-7")
            for node, jobs in listed:
                if isinstance(jobs, str):
                    ui.label(jobs).classes("text-caption text-negative")
                    continue
                for job in jobs:
                    _job_row(node, job, act, services)

    await refresh()
    ui.timer(PANEL_REFRESH_S, refresh, immediate=False)
    return refresh


def _job_row(
    node_id: str,
    job: DownloadJob,
    act: Callable[[Callable[[], Awaitable[object]], str], Awaitable[None]],
    services: MasterServices,
) -> None:
    row = testid(ui.column().classes("w-full gap-0"), f"download-{job.id}")
    overall = progress_percent(job.done_bytes, job.total_bytes)
    with row:
        with ui.row().classes("w-full items-center gap-2"):
            ui.icon("download", size="sm").classes("text-primary")
            ui.label(f"{job.source} → {job.folder}").classes("text-body1")
            ui.label(f"on {node_id}").classes("text-caption text-grey-7")
            ui.badge(job.state).props(f"color={_STATE_COLORS.get(job.state, 'grey')}")
            ui.space()
            testid(ui.label(f"{overall} %"), f"download-percent-{job.id}")
            ui.label(rate_text(job.bytes_per_second)).classes("text-caption")
            ui.label(eta_text(job.eta_seconds)).classes("text-caption")
            if job.state in downloads.STOPPABLE_STATES:
                cancel = ui.button(
                    "Cancel",
                    icon="cancel",
                    on_click=lambda: act(
                        lambda: downloads.cancel_download(services, node_id, job.id, ACTOR), "cancelled"
                    ),
                ).props("flat dense color=negative")
                testid(cancel, f"download-cancel-{job.id}")
            else:
                if job.state in downloads.RETRYABLE_STATES:
                    retry = ui.button(
                        "Retry",
                        icon="refresh",
                        on_click=lambda: act(
                            lambda: downloads.retry_download(services, node_id, job.id, ACTOR),
                            "retried (it resumes from the files already on the node)",
                        ),
                    ).props("flat dense color=primary")
                    testid(retry, f"download-retry-{job.id}")
                forget = ui.button(
                    "Forget",
                    icon="delete",
                    on_click=lambda: act(
                        lambda: downloads.cancel_download(services, node_id, job.id, ACTOR, remove=True),
                        "forgotten (partial files deleted)",
                    ),
                ).props("flat dense")
                testid(forget, f"download-forget-{job.id}")
        ui.linear_progress(overall / 100, show_value=False).props("rounded")
        for file in job.files:
            share = progress_percent(file.done_bytes, file.size_bytes)
            with ui.column().classes("w-full gap-0 pl-8"):
                with ui.row().classes("w-full justify-between"):
                    ui.label(file.path).classes("text-caption")
                    ui.label(f"{_bytes(file.done_bytes)} / {_bytes(file.size_bytes)}").classes("text-caption")
                ui.linear_progress(share / 100, show_value=False, size="6px")
        if job.error:
            ui.label(job.error).classes("text-caption text-negative")


_STATE_COLORS: Final = {
    "queued": "grey",
    "running": "primary",
    "verifying": "info",
    "completed": "positive",
    "failed": "negative",
    "cancelled": "warning",
}


def render_source_downloads(portal: Portal, definition: ModelDefinition) -> None:
    """The editor's "Download" per source of a saved model (the primary checkpoint, the extra folders).

    Offered on the model's node (its placement, else the default node) when its agent downloads from
    Hugging Face; each button starts the source into its folder under the node's first model root.
    """
    if not definition.sources:
        return
    services = portal.services
    node_id = definition.placement.node_id if definition.placement else services.runtime.default_node_id
    if "huggingface" not in download_nodes(services).get(node_id, []):
        return
    with testid(ui.card().classes("w-full gap-1"), "source-downloads"):
        ui.label(f"Sources (downloaded onto {node_id})").classes("text-subtitle1")
        for index, source in enumerate(definition.sources):
            _source_row(services, node_id, index, source)


def _source_row(services: MasterServices, node_id: str, index: int, source: ModelSource) -> None:
    async def start() -> None:
        body: dict[str, object] = {"kind": "huggingface", "repoId": source.repo_id, "folder": source.folder}
        if source.revision:
            body["revision"] = source.revision
        if source.allow_patterns:
            body["allowPatterns"] = source.allow_patterns
        try:
            request = HuggingFaceDownload.from_user_input(body)
            job = await downloads.start_download(services, node_id, request, ACTOR)
        except MirbadError as exc:
            ui.notify(str(exc), type="negative", multi_line=True)
            return
        ui.notify(f"downloading {job.source} into {job.folder} on {node_id}", type="positive")

    with ui.row().classes("items-center gap-2"):
        role = "primary checkpoint" if index == 0 else "extra folder"
        ui.label(f"{source.repo_id} → {check_download_folder(source.folder)} ({role})")
        testid(
            ui.button("Download", icon="download", on_click=start).props("flat dense"),
            f"source-download-{index}",
        )


async def render_models_downloads(portal: Portal) -> None:
    """The Models page's part: the Download box and the panel of every node (nothing if none offers any)."""
    if not download_nodes(portal.services):
        return
    refresh: list[Callable[[], Awaitable[None]]] = []

    async def started() -> None:
        for again in refresh:
            await again()

    await render_download_box(portal, started)
    refresh.append(await render_downloads_panel(portal))


async def render_nodes_downloads(portal: Portal) -> None:
    """The Nodes page's part: one downloads panel per node that offers downloads."""
    for node_id in download_nodes(portal.services):
        await render_downloads_panel(portal, node_id)
