"""The model editor: one input per setting, a message under each invalid one, the command line live.

Every change re-checks the whole form (:func:`check_form`), so each input shows its own message and
the preview always shows the exact command line the saved model would launch with. Saving a model
that runs does not restart it: the Models page then offers the restart with the changed settings.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final
from urllib.parse import quote

from nicegui import ui
from nicegui.elements.mixins.validation_element import ValidationElement
from nicegui.elements.mixins.value_element import ValueElement

from mirbad_master._composition import MasterServices
from mirbad_master.downloads.panels import render_source_downloads
from mirbad_master.exceptions import UnknownGpuError
from mirbad_master.nodes.views import CATALOGUE_FIX
from mirbad_master.ui._fleet import tags_param
from mirbad_master.ui._marks import code_block, link_button, testid
from mirbad_master.ui._portal import Portal
from mirbad_master.ui._refusals import PORTAL_ACTOR, show_under_field
from mirbad_orchestration.commandline import DEFAULT_TOTAL_GIB
from mirbad_orchestration.fleet import launch_total_gib
from mirbad_orchestration.registry import TAG_CATALOGUE, suggest_tags
from mirbad_protocol import ModelDefinition
from mirbad_protocol.agent import ProcessRuntimeInfo

from . import actions
from ._form import FORM_FIELDS, FormCheck, check_form, form_from_definition
from ._gpu_placement import GPUS_FIELD, check_gpu_placement, gpu_options, node_gpus

__all__ = [
    "ANY_NODE",
    "NEW_MODEL_DEFAULTS",
    "executables_of",
    "models_url",
    "node_options",
    "render_model_editor",
    "saved_url",
    "tag_options",
    "tag_suggestions",
    "total_gib_for",
]

ANY_NODE: Final = "any node"
"""The node select's label for no placement (the master then starts the model on its default node)."""

NEW_MODEL_DEFAULTS: Final[dict[str, Any]] = {
    "id": "",
    "servedName": "",
    "runtime": "llamacpp",
    "image": "vllm/vllm-openai:latest",
    "executable": "",
    "modelPath": "",
    "maxModelLen": 8192,
    "maxNumSeqs": 4,
    "memoryBudgetGiB": 8.0,
    "kvCacheDtype": "",
    "gpuLayers": None,
    "idleUnloadSeconds": None,
    "extraArgs": "",
    "tags": [],
    "nodeId": "",
    "gpuUuids": [],
    "autoStart": False,
    "autoStartOnRequest": False,
}
"""What a new model's form starts with."""

_LABELS: Final = {
    "id": "Model id",
    "servedName": "Served name (what clients send as model)",
    "runtime": "Runtime",
    "image": "Container image (vLLM)",
    "executable": "Executable (NAME@VERSION)",
    "modelPath": "Model path (under the node's model root)",
    "maxModelLen": "Context length (tokens)",
    "maxNumSeqs": "Parallel sequences",
    "memoryBudgetGiB": "Memory budget (GiB)",
    "kvCacheDtype": "KV cache type (empty: the runtime's default)",
    "gpuLayers": "GPU layers (llama.cpp; -1 = all)",
    "idleUnloadSeconds": "Stop after this many idle seconds (empty: never)",
    "extraArgs": "Extra arguments (passed as written)",
    "tags": "Tags",
    "nodeId": "Node",
    "gpuUuids": "GPUs (empty: all of the node's)",
}
_SWITCHES: Final = {
    "autoStart": "Start when its node comes up",
    "autoStartOnRequest": "Start when a request asks for it",
}


def executables_of(services: MasterServices) -> list[str]:
    """Every ``name@version`` some reachable node's process runtimes offer, sorted."""
    found: set[str] = set()
    for state in services.cache.nodes():
        for runtime in state.info.runtimes if state.info is not None else []:
            if isinstance(runtime, ProcessRuntimeInfo):
                found.update(f"{exe.name}@{exe.version}" for exe in runtime.executables)
    return sorted(found)


def tag_options(current: list[str]) -> dict[str, str]:
    """The tags picker's entries: the catalogue's tags with their labels, then the model's own slugs."""
    options = {info.slug: f"{info.label} ({info.slug})" for info in TAG_CATALOGUE}
    return options | {tag: tag for tag in current if tag not in options}


def tag_suggestions(definition: ModelDefinition | None, current: list[str]) -> list[str]:
    """The catalogue tags the form's model suggests (:func:`suggest_tags`) that it does not carry yet."""
    if definition is None:
        return []
    return [slug for slug in suggest_tags(definition) if slug not in current]


_TAG_LABELS: Final = {info.slug: info.label for info in TAG_CATALOGUE}
_TAG_HINTS: Final = {info.slug: info.description for info in TAG_CATALOGUE}


def saved_url(model_id: str, tags: list[str] | None = None) -> str:
    """Where the editor goes after a save: the Models page with the saved model in focus.

    ``tags`` is the filter of the Models page the editor was opened from, kept in the URL.
    """
    filtered = tags_param(tags or [])
    return f"/models?{filtered + '&' if filtered else ''}focus={quote(model_id)}"


def models_url(tags: list[str] | None = None) -> str:
    """The Models page with the filter ``tags`` (where Cancel goes back to)."""
    filtered = tags_param(tags or [])
    return f"/models?{filtered}" if filtered else "/models"


def node_options(nodes: list[str], current: str, default_node: str) -> dict[str, str]:
    """The node select's options, value to label: no placement first, then every registered node.

    A saved placement on a node that has left the registry stays offered (labelled so), so the editor
    opens and the operator sees where the model was meant to run.
    """
    options = {"": f"{ANY_NODE} (the default node, {default_node})"}
    options.update({node: node for node in nodes})
    if current and current not in options:
        options[current] = f"{current} (not registered)"
    return options


def total_gib_for(
    services: MasterServices,
    definition: ModelDefinition | None,
    node_id: str,
    gpus: Sequence[str] | None = None,
) -> float:
    """The memory vLLM's utilization is computed from on the model's node (a default when unknown).

    ``gpus`` are the GPUs the form chooses now; None takes the saved definition's.
    """
    state = services.cache.node(node_id or services.runtime.default_node_id)
    if state is None or state.memory is None:
        return DEFAULT_TOTAL_GIB
    if gpus is None:
        gpus = definition.placement.gpu_uuids if definition and definition.placement else []
    return launch_total_gib(state.memory, gpus)


async def render_model_editor(portal: Portal, model_id: str | None, tags: list[str] | None = None) -> None:
    """Build the editor for a new model (``model_id`` None) or a saved one.

    ``tags`` is the filter of the Models page it was opened from (``?tags=``): Save and Cancel go back
    to the page with that filter.
    """
    services = portal.services
    base = await services.models.get(model_id) if model_id is not None else None
    executables = executables_of(services)
    values = form_from_definition(base) if base is not None else _new_values(executables)
    nodes = node_options(
        [record.id for record in await services.nodes.list()],
        str(values.get("nodeId") or ""),
        services.runtime.default_node_id,
    )
    title = f"Edit {model_id}" if model_id else "New model"
    ui.label(title).classes("text-h5")
    inputs: dict[str, ValueElement[Any]] = {}
    gpus = gpu_options(
        node_gpus(services, str(values.get("nodeId") or "")), list(values.get("gpuUuids") or [])
    )
    with ui.card().classes("w-full"):
        with ui.grid(columns=2).classes("w-full gap-x-6 gap-y-1"):
            _inputs(inputs, values, base is not None, executables, {"nodeId": nodes, "gpuUuids": gpus})
        suggested = testid(ui.row().classes("items-center gap-1"), "tag-suggestions")
        if not any(exe.startswith("llama-server@") for exe in executables):
            missing = ui.label(f"No node catalogues a llama-server yet: {CATALOGUE_FIX}.")
            testid(missing.classes("text-caption text-warning"), "executable-hint")
            missing.bind_visibility_from(
                inputs["runtime"], "value", backward=lambda value: value == "llamacpp"
            )
    with ui.card().classes("w-full"):
        ui.label("Command line").classes("text-subtitle1")
        preview = testid(code_block("", language="bash").classes("w-full"), "command-preview")
        hint = ui.label("").classes("text-caption text-grey-7")
    if base is not None:
        render_source_downloads(portal, base)
    saving = testid(ui.button("Save", icon="save"), "save-model")
    link_button("Cancel", models_url(tags)).props("flat")

    # A new form does not greet its visitor with messages: an input shows its message once it was
    # changed, and every input once Save was pressed.
    touched: set[str] = set(inputs) if base is not None else set()

    async def check() -> FormCheck:
        current = {name: element.value for name, element in inputs.items()}
        others = await services.models.list()
        chosen = [str(uuid) for uuid in current.get("gpuUuids") or []]
        total = total_gib_for(services, base, str(current.get("nodeId") or ""), chosen)
        result = _with_gpu_check(services, check_form(current, others, base=base, total_gib=total))
        for name, element in inputs.items():
            if isinstance(element, ValidationElement):
                element.error = result.errors.get(name) if name in touched else None
        show_suggestions(tag_suggestions(result.definition, list(inputs["tags"].value or [])))
        if result.command is not None:
            preview.set_content(result.command)
            hint.set_text("Exactly what the node runs (the program is resolved by the node).")
        else:
            hint.set_text("Fix the marked fields to see the command line.")
        return result

    def show_suggestions(slugs: list[str]) -> None:
        suggested.clear()
        suggested.set_visibility(bool(slugs))
        with suggested:
            ui.label("Suggested tags:").classes("text-caption text-grey-8")
            for slug in slugs:
                chip = ui.chip(
                    _TAG_LABELS.get(slug, slug), icon="add", on_click=lambda slug=slug: add_tag(slug)
                )
                chip.props("clickable outline dense").tooltip(_TAG_HINTS.get(slug, ""))
                testid(chip, f"suggest-tag-{slug}")

    def add_tag(slug: str) -> None:
        tags_input = inputs["tags"]
        current = list(tags_input.value or [])
        if slug not in current:
            tags_input.value = [*current, slug]  # the change re-checks the form, which redraws the row

    async def save() -> None:
        touched.update(inputs)
        result = await check()
        if result.definition is None:
            ui.notify("Some fields are invalid: see the messages under them.", type="warning")
            return
        save_it = actions.create_model if base is None else actions.update_model
        try:
            stored = await save_it(services, result.definition, PORTAL_ACTOR)
        except Exception as exc:  # under its field where the form has one, else as /api words it
            show_under_field(exc, {**inputs, GPUS_FIELD: inputs["gpuUuids"]})
            return
        ui.notify(f"{stored.id} saved", type="positive")
        # Replace the editor's entry: Back then leaves the saved model rather than reopening its form.
        ui.run_javascript(f"window.location.replace({json.dumps(saved_url(stored.id, tags))})")

    def watch(name: str, element: ValueElement[Any]) -> None:
        async def changed() -> None:
            touched.add(name)
            await check()

        element.on_value_change(changed)

    def offer_node_gpus() -> None:
        # Another node has other GPUs: offer its own, keeping only the chosen ones it reports.
        gpus = node_gpus(services, str(inputs["nodeId"].value or ""))
        reported = {gpu.uuid for gpu in gpus or []}
        kept = [uuid for uuid in inputs["gpuUuids"].value or [] if uuid in reported]
        picker = inputs["gpuUuids"]
        assert isinstance(picker, ui.select)
        picker.set_options(gpu_options(gpus, kept), value=kept)

    inputs["nodeId"].on_value_change(offer_node_gpus)
    for name, element in inputs.items():
        watch(name, element)
    _runtime_dependent(inputs)
    saving.on_click(save)
    await check()


def _with_gpu_check(services: MasterServices, result: FormCheck) -> FormCheck:
    """``result``, or the GPU input's message where its node does not report a chosen GPU."""
    if result.definition is None:
        return result
    try:
        check_gpu_placement(services, result.definition)
    except UnknownGpuError as exc:
        return FormCheck(None, {"gpuUuids": exc.reason})
    return result


def _runtime_dependent(inputs: dict[str, ValueElement[Any]]) -> None:
    """Show the image for vLLM only, the executable and GPU layers for the process runtimes only."""
    runtime = inputs["runtime"]
    inputs["image"].bind_visibility_from(runtime, "value", backward=lambda value: value == "vllm")
    for name in ("executable", "gpuLayers"):
        inputs[name].bind_visibility_from(runtime, "value", backward=lambda value: value != "vllm")


def _new_values(executables: list[str]) -> dict[str, Any]:
    values = dict(NEW_MODEL_DEFAULTS)
    # A fleet usually offers one llama-server: preselect it for the default runtime.
    values["executable"] = next((exe for exe in executables if exe.startswith("llama-server@")), "")
    return values


def _inputs(
    inputs: dict[str, ValueElement[Any]],
    values: dict[str, Any],
    editing: bool,
    executables: list[str],
    choices: dict[str, dict[str, str]],
) -> None:
    """Build the inputs; ``choices`` are the options of the placement's selects (``nodeId``, ``gpuUuids``)."""
    for name in FORM_FIELDS:
        if name in _SWITCHES:
            continue
        inputs[name] = _input(name, values.get(name), executables, choices)
        testid(inputs[name], f"field-{name}")
    if editing:
        inputs["id"].props["readonly"] = True
    with ui.column().classes("gap-0"):
        for name, label in _SWITCHES.items():
            inputs[name] = ui.switch(label, value=bool(values.get(name)))
            testid(inputs[name], f"field-{name}")


def _input(
    name: str, value: Any, executables: list[str], choices: dict[str, dict[str, str]]
) -> ValueElement[Any]:
    label = _LABELS[name]
    element: ValidationElement[Any]
    if name == "runtime":
        element = ui.select(["llamacpp", "vllm", "mlx"], label=label, value=value or "llamacpp")
    elif name == "executable":
        options = sorted({*executables, *([value] if value else [])})
        element = ui.select(options, label=label, value=value or None, new_value_mode="add-unique")
        element.props("use-input hide-selected fill-input input-debounce=0 clearable")
    elif name == "nodeId":
        element = ui.select(choices["nodeId"], label=label, value=value or "")
    elif name == "gpuUuids":
        # The node's GPUs as its telemetry reports them (UUID, name, memory); none chosen = all.
        element = ui.select(choices["gpuUuids"], label=label, value=list(value or []), multiple=True)
        element.props("use-chips clearable")
    elif name == "tags":
        # The catalogue's tags to pick from (with their labels); a slug of one's own is typed in.
        current = list(value or [])
        element = ui.select(
            tag_options(current), label=label, value=current, multiple=True, new_value_mode="add-unique"
        )
        element.props("use-chips use-input input-debounce=0")
    elif name in ("maxModelLen", "maxNumSeqs", "gpuLayers"):
        element = ui.number(label, value=value, precision=0)
    elif name == "memoryBudgetGiB":
        element = ui.number(label, value=value, step=0.5)
    elif name == "idleUnloadSeconds":
        element = ui.number(label, value=value, min=1, step=60)
    else:
        element = ui.input(label, value="" if value is None else str(value))
    element.classes("w-full")
    # An empty rule set keeps room for a message (the grid does not jump); the form sets the messages.
    element.validation = {}
    return element.without_auto_validation()
