"""The Nodes page: each node's state, memory, GPUs, runtimes and features; enrolling and adding nodes.

A machine joins in two steps, as in ``docs/agent.md``: a one-time join token and the exact command to
run there (its agent trades the token for a certificate), then registering the node with the URL its
agent answers at.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Final
from urllib.parse import urlsplit

from nicegui import ui

from mirbad_master._llama_server_build import LlamaServerBuild
from mirbad_master._views import NodeSummary, node_summary
from mirbad_master.audit.views import audit_link
from mirbad_master.downloads.panels import render_nodes_downloads
from mirbad_master.takeover.panels import render_master_identity
from mirbad_master.ui._format import ago, gib, percent
from mirbad_master.ui._llama_server_build import render_llama_server_build
from mirbad_master.ui._marks import code_block, testid
from mirbad_master.ui._portal import Portal
from mirbad_master.ui._refusals import PORTAL_ACTOR, show_under_field
from mirbad_orchestration.fleet import agent_url_for
from mirbad_protocol import InvalidFieldError
from mirbad_protocol.agent import DEFAULT_AGENT_PORT, ContainerRuntimeInfo, ProcessRuntimeInfo, RuntimeInfo

from . import actions
from .actions import EnrollmentTokenRequest, NodeCreate
from .views import catalogue_hint, lacks_llama_server

__all__ = [
    "REFRESH_S",
    "TOKEN_LIFETIMES",
    "enrollment_request",
    "enrollment_target",
    "node_request",
    "render_nodes",
    "runtime_text",
]

REFRESH_S: Final = 5.0
"""How often the node cards are read again."""
TOKEN_LIFETIMES: Final = {
    "1 hour": timedelta(hours=1),
    "1 day": timedelta(days=1),
    "7 days": timedelta(days=7),
}
"""The join token lifetimes offered."""


def enrollment_target(text: str) -> tuple[str | None, str | None]:
    """What the enroll form's address field means: the address for the certificate and the agent URL.

    The field takes what ``POST /api/nodes/enrollment-tokens`` takes, in one box: a host name or IP
    address (the agent at port 9443), ``host:port`` / ``[v6]:port``, or the agent URL
    ``https://host:port``. Empty is neither (the node is added by hand afterwards).

    Returns:
        ``(address, agent_url)``: the agent URL is None where it is ``https://{address}:9443``.

    Raises:
        InvalidFieldError: ``address``, saying what was expected.
    """
    text = text.strip()
    if not text:
        return None, None
    if "://" in text:
        parts = urlsplit(text)
        if parts.scheme != "https" or not parts.hostname:
            raise InvalidFieldError("address", "an agent URL is https://host:port (agents speak only TLS)")
        return parts.hostname, text
    host, port = _host_and_port(text)
    return host, (agent_url_for(host, port) if port is not None else None)


def _host_and_port(text: str) -> tuple[str, int | None]:
    """``host``, ``host:port``, ``v6``, ``[v6]`` or ``[v6]:port``."""
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise InvalidFieldError("address", "an IPv6 address with a port is written [address]:port")
        return host, _port(rest[1:]) if rest else None
    if text.count(":") == 1:
        host, _, port = text.partition(":")
        return host, _port(port)
    return text, None  # a name, an IPv4 address or a bare IPv6 address


def _port(text: str) -> int:
    if not text.isdecimal() or not 0 < int(text) < 65536:
        raise InvalidFieldError(
            "address", f"{text!r} is not a port (1-65535; the agent's default is {DEFAULT_AGENT_PORT})"
        )
    return int(text)


def enrollment_request(
    node_name: str, ttl: timedelta, address: str | None = None, agent_url: str | None = None
) -> EnrollmentTokenRequest:
    """The enroll form's input as the API's body, validated as the API validates it.

    Args:
        node_name: the name the node's certificate will carry.
        ttl: how long the token may be used.
        address: the host the master reaches the agent at (goes into the certificate's names).
        agent_url: where the agent answers, when not ``https://{address}:9443``.

    Raises:
        InvalidFieldError: the node name, the lifetime, the address or the agent URL is unusable
            (``nodeName``, ``ttlSeconds``, ``address``, ``agentUrl``).
    """
    body: dict[str, object] = {"nodeName": node_name, "ttlSeconds": int(ttl.total_seconds())}
    body["address"] = address or None
    if agent_url is not None:
        body["agentUrl"] = agent_url
    return EnrollmentTokenRequest.from_user_input(body)


def node_request(node_id: str, name: str, agent_url: str) -> NodeCreate:
    """The add-node form's input as the API's body, validated as the API validates it.

    Raises:
        InvalidFieldError: the id, name or URL is invalid.
    """
    return NodeCreate.from_user_input({"id": node_id, "name": name, "agentUrl": agent_url})


def runtime_text(runtime: RuntimeInfo) -> str:
    """``llamacpp (process: llama-server@b6000)`` / ``vllm (container)``."""
    if isinstance(runtime, ProcessRuntimeInfo):
        exes = ", ".join(f"{exe.name}@{exe.version}" for exe in runtime.executables) or "no executable"
        return f"{runtime.runtime} (process: {exes})"
    assert isinstance(runtime, ContainerRuntimeInfo)
    network = f", network {runtime.network}" if runtime.network else ""
    return f"{runtime.runtime} (container{network})"


async def render_nodes(portal: Portal) -> None:
    """Build the Nodes page into the current container and keep it fresh."""
    services = portal.services
    ui.label("Nodes").classes("text-h5")
    cards = ui.column().classes("w-full gap-4")

    async def refresh() -> None:
        records = await services.nodes.list()
        summaries = [node_summary(record, services.cache.node(record.id)) for record in records]
        cards.clear()
        with cards:
            for summary in summaries:
                _node_card(summary, services.llama_server_build if summary.local else None)

    with ui.row().classes("w-full gap-4 items-start"):
        _enroll_card(portal)
        _register_card(portal, refresh)
    await refresh()
    ui.timer(REFRESH_S, refresh, immediate=False)
    await render_nodes_downloads(portal)
    await render_master_identity(services)


def _node_card(node: NodeSummary, build: LlamaServerBuild | None = None) -> None:
    card = ui.card().classes("w-full gap-1")
    testid(card, f"node-{node.id}")
    with card:
        with ui.row().classes("items-center gap-2"):
            ui.icon("dns", size="sm").classes("text-primary")
            ui.label(f"{node.name}").classes("text-h6")
            ui.label(f"({node.id}{', this machine' if node.local else ''})").classes("text-grey-7")
            ui.badge("reachable" if node.reachable else "unreachable").props(
                f"color={'positive' if node.reachable else 'negative'}"
            )
            testid(ui.link("Audit", audit_link(node.id)).classes("text-caption"), f"audit-node-{node.id}")
        ui.label(
            f"{node.agent_url} · last seen {ago(node.last_seen, datetime.now(UTC))} · "
            f"agent {node.info.version if node.info else '?'} · {len(node.models)} model instance(s)"
        ).classes("text-caption text-grey-7")
        if node.error:
            ui.label(node.error).classes("text-caption text-negative")
        if node.memory is not None:
            used = max(node.memory.total_gib - node.memory.available_gib, 0.0)
            kind = "unified" if node.memory.unified else "discrete GPUs"
            ui.label(f"Memory ({kind}): {gib(used)} used of {gib(node.memory.total_gib)}")
            ui.linear_progress(percent(used, node.memory.total_gib), show_value=False).props("rounded")
            for gpu in node.memory.gpus:
                usage = f"{gpu.used_mib:.0f} / {gpu.total_mib:.0f} MiB"
                ui.label(f"GPU {gpu.index} · {gpu.name or 'unnamed'} · {usage} · {gpu.uuid}").classes(
                    "text-caption"
                )
        if node.info is not None:
            runtimes = ", ".join(runtime_text(runtime) for runtime in node.info.runtimes) or "none"
            ui.label(f"Runtimes: {runtimes}").classes("text-body2")
            render_llama_server_build(build)
            if lacks_llama_server(node.info) and build is None:
                hint = ui.label(catalogue_hint(node.id)).classes("text-caption text-warning")
                testid(hint, f"catalogue-hint-{node.id}")
            with ui.row().classes("gap-1 items-center"):
                ui.label("Features:").classes("text-body2")
                for feature in node.info.features:
                    ui.chip(feature).props("dense outline")


def _enroll_card(portal: Portal) -> None:
    with ui.card().classes("grow min-w-[24rem] gap-2"):
        ui.label("Enroll a node").classes("text-h6")
        ui.label("1. Issue a one-time join token and run the command on the new machine.").classes(
            "text-caption text-grey-7"
        )
        name = testid(ui.input("Node name (its certificate's name)").classes("w-full"), "enroll-name")
        address = testid(
            ui.input(
                "Address the master reaches it at (optional)",
                placeholder=f"gpu-1.lan, 10.0.0.7:{DEFAULT_AGENT_PORT} or https://gpu-1.lan:{DEFAULT_AGENT_PORT}",
            ).classes("w-full"),
            "enroll-address",
        )
        lifetime = ui.select(list(TOKEN_LIFETIMES), value="1 hour", label="Token valid for").classes("w-full")
        result = ui.column().classes("w-full gap-1")
        # Each field of the API's body and the input it came from, so an error is drawn under its own.
        fields = {"nodeName": name, "address": address, "agentUrl": address, "ttlSeconds": lifetime}

        async def issue() -> None:
            for shown in (name, address, lifetime):
                shown.error = None
            try:
                host, agent_url = enrollment_target(address.value or "")
                ttl = TOKEN_LIFETIMES[str(lifetime.value)]
                request = enrollment_request((name.value or "").strip(), ttl, host, agent_url)
                issued = await actions.issue_enrollment(portal.services, request, PORTAL_ACTOR)
            except Exception as exc:  # under its field where the form has one, else as /api words it
                show_under_field(exc, fields)
                return
            result.clear()
            with result:
                ui.label(
                    f"Valid once until {issued.expires_at:%Y-%m-%d %H:%M} UTC; shown this once."
                ).classes("text-warning")
                testid(
                    code_block(issued.install_command, language="bash").classes("w-full"), "enroll-command"
                )
                ui.label("Then start it: mirbad-agent serve --model-root /srv/models").classes("text-caption")
                ui.label(
                    "For llama.cpp models, catalogue a llama-server there first: "
                    "mirbad-agent executables add PATH"
                ).classes("text-caption")

        testid(ui.button("Issue token", icon="vpn_key", on_click=issue), "issue-token")


def _register_card(portal: Portal, refresh: object) -> None:
    with ui.card().classes("grow min-w-[24rem] gap-2"):
        ui.label("Add an enrolled node").classes("text-h6")
        ui.label("2. Register it with the URL its agent answers at.").classes("text-caption text-grey-7")
        node_id = ui.input("Node id (lowercase)").classes("w-full")
        name = ui.input("Node name (as enrolled)").classes("w-full")
        url = ui.input("Agent URL", placeholder="https://gpu-1.lan:9443").classes("w-full")
        fields = {"id": node_id, "name": name, "agentUrl": url}

        async def add() -> None:
            for element in fields.values():
                element.error = None
            try:
                node = node_request(*((field.value or "").strip() for field in (node_id, name, url)))
                record, _state = await actions.add_node(portal.services, node, PORTAL_ACTOR)
            except Exception as exc:  # under its field (the URL's input for any other), else as /api words it
                show_under_field(exc, fields, fallback=url)
                return
            ui.notify(f"node {record.id} added", type="positive")
            if callable(refresh):
                await refresh()

        ui.button("Add node", icon="add", on_click=add)
