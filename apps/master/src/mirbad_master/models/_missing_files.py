"""A model card's "files missing" note and the Download dialog it opens, prefilled from the sources.

The Models page reads, with every refresh, which stopped models miss a path on their node
(:mod:`mirbad_master.models._model_files`); their cards name each missing path. Where the node's agent
downloads, a Download button opens a dialog with one row per missing path: the source that fills it
(the primary checkpoint for the ``modelPath``, an extra folder for the others) written as the
search box takes it, its folder and its file patterns, all editable. A path no source names gets an
empty source and the folder the path lies in. Once the download completes the next refresh finds
the path and the note is gone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nicegui import ui

from mirbad_master.downloads import actions as downloads
from mirbad_master.downloads.panels import SEARCH_LABEL, download_nodes, parse_download
from mirbad_master.ui._marks import testid
from mirbad_master.ui._portal import Portal
from mirbad_master.ui._refusals import PORTAL_ACTOR, show_under_field
from mirbad_protocol import ModelDefinition, ModelSource
from mirbad_protocol.admin import ModelView

from ._model_files import MissingFiles, missing_model_files, primary_source

__all__ = ["MissingFilesNotes", "PrefilledDownload", "prefilled_downloads"]


@dataclass(frozen=True)
class PrefilledDownload:
    """One row of the dialog as it opens.

    Attributes:
        path: the missing path it fills.
        source: the search box's text (``owner/name@revision``), empty when no source names the path.
        folder: the folder it downloads into.
        patterns: the source's allow patterns, comma-separated.
    """

    path: str
    source: str
    folder: str
    patterns: str


def prefilled_downloads(definition: ModelDefinition, paths: Sequence[str]) -> list[PrefilledDownload]:
    """A row per missing path of ``definition``, filled from the source that names it."""
    rows: list[PrefilledDownload] = []
    for path in paths:
        source = _source_of(definition, path)
        if source is None:
            folder = path.replace("\\", "/").split("/", 1)[0]
            rows.append(PrefilledDownload(path, "", folder, ""))
            continue
        text = f"{source.repo_id}@{source.revision}" if source.revision else source.repo_id
        rows.append(PrefilledDownload(path, text, source.folder, ", ".join(source.allow_patterns)))
    return rows


def _source_of(definition: ModelDefinition, path: str) -> ModelSource | None:
    if path == definition.model_path:
        return primary_source(definition)
    return next((source for source in definition.sources if source.folder == path), None)


class MissingFilesNotes:
    """The notes of one Models page: read once per refresh, drawn on each card.

    Args:
        portal: the portal.
        dialogs: where the dialog opens (outside the list, which every refresh rebuilds).
    """

    def __init__(self, portal: Portal, dialogs: ui.element) -> None:
        self._portal = portal
        self._dialogs = dialogs
        self._missing: dict[str, MissingFiles] = {}

    async def read(self, views: Sequence[ModelView]) -> None:
        """Ask the nodes which of ``views``' paths are missing (one request per node)."""
        self._missing = await missing_model_files(self._portal.services, views)

    def note(self, definition: ModelDefinition) -> None:
        """The card's note, when a path of ``definition`` is missing; with Download where it can."""
        missing = self._missing.get(definition.id)
        if missing is None:
            return
        with testid(ui.row().classes("items-center gap-2"), f"missing-files-{definition.id}"):
            ui.icon("folder_off", size="xs").classes("text-warning")
            listed = ", ".join(missing.paths)
            ui.label(f"Not on node {missing.node_id}: {listed}").classes("text-caption text-warning")
            if missing.node_id in download_nodes(self._portal.services):
                button = ui.button(
                    "Download", icon="download", on_click=lambda: self._open(definition, missing)
                )
                testid(button.props("flat dense no-caps color=primary"), f"download-missing-{definition.id}")

    def _open(self, definition: ModelDefinition, missing: MissingFiles) -> None:
        with self._dialogs:
            _dialog(self._portal, definition, missing)


def _dialog(portal: Portal, definition: ModelDefinition, missing: MissingFiles) -> None:
    services = portal.services
    with ui.dialog() as dialog, testid(ui.card().classes("w-[44rem] max-w-full gap-2"), "missing-dialog"):
        ui.label(f"Download the files of {definition.id} onto {missing.node_id}").classes("text-h6")
        rows: list[tuple[ui.input, ui.input, ui.input]] = []
        for index, row in enumerate(prefilled_downloads(definition, missing.paths)):
            ui.label(f"for {row.path}").classes("text-caption text-grey-7")
            with ui.row().classes("w-full items-start gap-2 no-wrap"):
                source = ui.input(SEARCH_LABEL, value=row.source)
                testid(source.classes("grow"), f"missing-source-{index}")
                folder = ui.input("Target folder", value=row.folder)
                testid(folder.classes("w-48"), f"missing-folder-{index}")
            patterns = ui.input("Files (Hugging Face: globs, comma-separated)", value=row.patterns)
            testid(patterns.classes("w-full"), f"missing-patterns-{index}")
            rows.append((source, folder, patterns))
        token = ui.input("Token (private repositories)", password=True).classes("w-full")

        started: list[str] = []

        async def start() -> None:
            # A row that started is not sent again when a later one is refused and Download is pressed again.
            while rows:
                source, folder, patterns = rows[0]
                for element in (source, folder):
                    element.error = None
                try:
                    request = parse_download(
                        str(source.value or ""),
                        str(folder.value or ""),
                        patterns=str(patterns.value or ""),
                        token=str(token.value or ""),
                    )
                    job = await downloads.start_download(services, missing.node_id, request, PORTAL_ACTOR)
                except Exception as exc:  # under the folder or the source, else as /api words it
                    show_under_field(exc, {"folder": folder}, fallback=source)
                    return
                started.append(f"{job.source} into {job.folder}")
                rows.pop(0)
                for element in (source, folder, patterns):
                    element.disable()
            token.value = ""
            dialog.close()
            ui.notify(f"downloading {'; '.join(started)} on {missing.node_id}", type="positive")

        with ui.row().classes("w-full justify-end"):
            ui.button("Cancel", on_click=dialog.close).props("flat")
            testid(ui.button("Download", icon="download", on_click=start), "missing-start")
    dialog.open()
