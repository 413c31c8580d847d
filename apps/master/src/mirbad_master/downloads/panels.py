"""Downloads in the portal: the search box that starts one, the panel that follows them, the editor's sources.

The room has no page of its own: these panels are embedded by the Models and Nodes pages and the model
editor, so they are the room's public portal part (``panels``), which other rooms may import; its
``api`` and its private modules stay its own.

Every start, cancel, retry and removal goes through the room's :mod:`.actions` as the portal's
administrator, the API's own path (the feature check, the audit line; a token is forwarded and never
shown again), and a refusal is shown as ``/api`` words it. Only nodes whose agent reports a
download feature flag are offered; the panel lists each such node's jobs with a progress bar per
file and overall, the rate and the ETA, and a Cancel (Forget, once stopped) button.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

from nicegui import ui

from mirbad_master._composition import MasterServices
from mirbad_master.ui._marks import testid
from mirbad_master.ui._portal import Portal
from mirbad_master.ui._refusals import PORTAL_ACTOR, REFUSED, act, refusal_text, show_refusal
from mirbad_protocol import InvalidFieldError, MirbadError, ModelDefinition, ModelSource
from mirbad_protocol.downloads import DownloadJob, HuggingFaceDownload, check_download_folder

from . import actions as downloads
from ._progress import byte_text, eta_text, progress_percent, rate_text
from ._search import SEARCH_LABEL, default_folder, parse_download

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


def download_nodes(services: MasterServices) -> dict[str, list[str]]:
    """Each node whose agent offers downloads, with the kinds it offers (from the monitor's last read)."""
    offered: dict[str, list[str]] = {}
    for state in services.cache.nodes():
        kinds = downloads.download_kinds(state.info)
        if kinds:
            offered[state.node_id] = kinds
    return dict(sorted(offered.items()))


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
            except InvalidFieldError as exc:  # shown under its field, not as a notification
                fields.get(exc.field.split(".")[0], source).error = exc.reason
                return
            job = await act(downloads.start_download(services, str(node.value), request, PORTAL_ACTOR))
            if job is REFUSED:
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

    async def run(action: Callable[[], Awaitable[object]], done: str) -> None:
        if await act(action(), done=done) is not REFUSED:
            await refresh()

    async def refresh() -> None:
        nodes = [node_id] if node_id is not None else list(download_nodes(services))
        listed: list[tuple[str, list[DownloadJob] | str]] = []
        for node in nodes:
            try:
                listed.append((node, await downloads.node_downloads(services, node)))
            except MirbadError as exc:
                listed.append((node, refusal_text(exc)))
        body.clear()
        with body:
            if not any(isinstance(jobs, list) and jobs for _node, jobs in listed):
                ui.label("No downloads.").classes("text-grey-7")
            for node, jobs in listed:
                if isinstance(jobs, str):
                    ui.label(jobs).classes("text-caption text-negative")
                    continue
                for job in jobs:
                    _job_row(node, job, run, services)

    await refresh()
    ui.timer(PANEL_REFRESH_S, refresh, immediate=False)
    return refresh


def _job_row(
    node_id: str,
    job: DownloadJob,
    run: Callable[[Callable[[], Awaitable[object]], str], Awaitable[None]],
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
                    on_click=lambda: run(
                        lambda: downloads.cancel_download(services, node_id, job.id, PORTAL_ACTOR),
                        "cancelled",
                    ),
                ).props("flat dense color=negative")
                testid(cancel, f"download-cancel-{job.id}")
            else:
                if job.state in downloads.RETRYABLE_STATES:
                    retry = ui.button(
                        "Retry",
                        icon="refresh",
                        on_click=lambda: run(
                            lambda: downloads.retry_download(services, node_id, job.id, PORTAL_ACTOR),
                            "retried (it resumes from the files already on the node)",
                        ),
                    ).props("flat dense color=primary")
                    testid(retry, f"download-retry-{job.id}")
                forget = ui.button(
                    "Forget",
                    icon="delete",
                    on_click=lambda: run(
                        lambda: downloads.cancel_download(
                            services, node_id, job.id, PORTAL_ACTOR, remove=True
                        ),
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
                    ui.label(f"{byte_text(file.done_bytes)} / {byte_text(file.size_bytes)}").classes(
                        "text-caption"
                    )
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
        except InvalidFieldError as exc:
            show_refusal(exc)
            return
        job = await act(downloads.start_download(services, node_id, request, PORTAL_ACTOR))
        if job is REFUSED:
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
