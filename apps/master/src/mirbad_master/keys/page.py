"""The Access page: API keys (created once, revoked, limited), their usage, and connection snippets."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from fastapi import Request
from nicegui import ui
from pydantic import ValidationError

from mirbad_master.ui._fleet import fleet_snapshot
from mirbad_master.ui._format import count
from mirbad_master.ui._marks import code_block, testid
from mirbad_master.ui._portal import Portal
from mirbad_master.ui._refusals import PORTAL_ACTOR, REFUSED, act, show_under_field
from mirbad_protocol import InvalidFieldError
from mirbad_protocol.admin import ApiKeyCreate, ApiKeyCreated, ApiKeyInfo, KeyUsage

from . import actions
from ._snippets import JAVASCRIPT_FILE_NAME, SNIPPET_LANGUAGES, snippets

__all__ = [
    "KEY_FIELDS",
    "SNIPPET_PLACEHOLDER_MODEL",
    "key_request",
    "render_keys",
    "router_url",
    "snippet_model",
    "usage_line",
    "usage_totals",
]

KEY_FIELDS: Final = ("name", "allowedModels", "expiresAt", "requestsPerMinute", "tokensPerMinute")
"""The create dialog's inputs, by wire name (``expiresAt`` is typed as days from now)."""


SNIPPET_PLACEHOLDER_MODEL: Final = "my-model"
"""The model the snippets name while the registry is empty."""


def snippet_model(names: list[str], ready: list[str]) -> str:
    """The served name the snippets start with: the first Ready one, else the first one at all.

    A snippet for a model that is not Ready only shows the router's refusal, so a Ready model is
    preferred whatever its place in the alphabet (the stopped example model sorts first on a new master).
    """
    answering = sorted(name for name in ready if name in names)
    if answering:
        return answering[0]
    return names[0] if names else SNIPPET_PLACEHOLDER_MODEL


def key_request(values: Mapping[str, Any], now: datetime) -> tuple[ApiKeyCreate | None, dict[str, str]]:
    """The create request of the dialog's values, or a message per invalid input.

    ``expiresAt`` is given in days from ``now`` (empty: never); limits are optional whole numbers.
    """
    errors: dict[str, str] = {}
    data: dict[str, Any] = {
        "name": values.get("name") or "",
        "allowedModels": list(values.get("allowedModels") or []),
    }
    days = values.get("expiresAt")
    if days not in (None, ""):
        if float(days) <= 0:
            errors["expiresAt"] = "must be at least a part of a day from now"
        else:
            data["expiresAt"] = (now + timedelta(days=float(days))).isoformat()
    for name in ("requestsPerMinute", "tokensPerMinute"):
        value = values.get(name)
        if value not in (None, ""):
            number = float(value)
            data[name] = int(number) if number.is_integer() else number
    try:
        ApiKeyCreate.model_validate(data)  # every input's own message at once
        request = ApiKeyCreate.from_user_input(data)  # then the API's user-input limits
    except ValidationError as exc:
        for error in exc.errors(include_url=False):
            field = str(error["loc"][0]) if error["loc"] else "name"
            errors.setdefault(field, str(error["msg"]).removeprefix("Value error, "))
        return None, errors
    except InvalidFieldError as exc:
        errors.setdefault(exc.field, exc.reason)
        return None, errors
    return (None, errors) if errors else (request, errors)


def usage_line(requests: int, tokens: int) -> str:
    """A key's usage as its row says it: ``1 request · 12 tokens``."""
    return f"{count(requests, 'request')} · {count(tokens, 'token')}"


def usage_totals(usage: Iterable[KeyUsage]) -> dict[str, tuple[int, int]]:
    """Requests and tokens per key id, summed over its models."""
    totals: dict[str, tuple[int, int]] = {}
    for entry in usage:
        requests, tokens = totals.get(entry.key_id, (0, 0))
        totals[entry.key_id] = (requests + entry.requests, tokens + entry.total_tokens)
    return totals


def router_url(request: Request) -> str:
    """The ``/v1`` URL as the visitor reaches this master."""
    return str(request.base_url).rstrip("/") + "/v1"


async def render_keys(portal: Portal, request: Request) -> None:
    """Build the Access page into the current container."""
    services = portal.services
    ui.label("Access").classes("text-h5")
    dialogs = ui.element("div")
    with ui.card().classes("w-full"):
        with ui.row().classes("w-full items-center"):
            ui.label("API keys").classes("text-h6")
            ui.space()
            required = ui.switch("Require a key on /v1", value=await services.keys.keys_required())
            testid(required, "require-keys")
            testid(
                ui.button("Create key", icon="add", on_click=lambda: _open_create(portal, dialogs, refresh)),
                "create-key",
            )
        keys_table = ui.column().classes("w-full")

    async def toggle_required() -> None:
        if bool(required.value) == await services.keys.keys_required():
            return  # the page caught up with the store (the first key turns keys on)
        if await act(actions.set_keys_required(services, bool(required.value), PORTAL_ACTOR)) is REFUSED:
            return
        ui.notify("Keys are required on /v1" if required.value else "/v1 answers without a key", type="info")

    required.on_value_change(toggle_required)

    async def refresh() -> None:
        required.set_value(await services.keys.keys_required())
        keys = await services.keys.list()
        totals = usage_totals(await services.keys.usage())
        keys_table.clear()
        with keys_table:
            _keys(keys, totals, lambda key: _confirm_revoke(portal, dialogs, key, refresh))

    await refresh()
    snapshot = await fleet_snapshot(services)
    names = sorted(row.view.definition.served_name for row in snapshot.models)
    _snippet_card(router_url(request), names, snippet_model(names, snapshot.ready_names))


def _keys(keys: list[ApiKeyInfo], totals: dict[str, tuple[int, int]], revoke: Any) -> None:
    if not keys:
        ui.label("No key yet: /v1 answers without one until the first key is created.").classes("text-grey-7")
        return
    now = datetime.now(UTC)
    for key in keys:
        state = key.state(now)
        requests, tokens = totals.get(key.id, (0, 0))
        row = ui.row().classes("w-full items-center gap-4 py-1 border-b")
        testid(row, f"key-{key.name}")
        with row:
            badge = ui.badge(state).props(f"color={_STATE_COLORS[state]}")
            testid(badge, f"key-state-{key.name}")
            with ui.column().classes("gap-0 grow"):
                ui.label(f"{key.name} · {key.prefix}…").classes("text-weight-medium")
                ui.label(_details(key)).classes("text-caption text-grey-7")
            ui.label(usage_line(requests, tokens)).classes("text-caption")
            if state != "revoked":
                button = ui.button("Revoke", icon="block", on_click=lambda key=key: revoke(key))
                button.props("flat dense color=negative")
                testid(button, f"revoke-{key.name}")


_STATE_COLORS: Final = {"active": "positive", "expired": "warning", "revoked": "grey-7"}


def _details(key: ApiKeyInfo) -> str:
    models = ", ".join(key.allowed_models) if key.allowed_models else "every model"
    expires = key.expires_at.strftime("%Y-%m-%d %H:%M UTC") if key.expires_at else "never"
    limits = [
        f"{key.requests_per_minute} req/min" if key.requests_per_minute else "",
        f"{key.tokens_per_minute} tok/min" if key.tokens_per_minute else "",
    ]
    limit = ", ".join(part for part in limits if part) or "no limits"
    used = key.last_used_at.strftime("%Y-%m-%d %H:%M UTC") if key.last_used_at else "never"
    return f"models: {models} · expires: {expires} · {limit} · last used: {used}"


def _open_create(portal: Portal, dialogs: ui.element, refresh: Any) -> None:
    with dialogs, ui.dialog() as dialog, ui.card().classes("w-[32rem] gap-2"):
        ui.label("Create an API key").classes("text-h6")
        inputs: dict[str, Any] = {
            "name": testid(ui.input("Name (what the key is for)"), "key-name"),
            "allowedModels": ui.input_chips(
                "Allowed models (empty: every model)", new_value_mode="add-unique"
            ),
            "expiresAt": ui.number("Expires after (days; empty: never)", min=0),
            "requestsPerMinute": ui.number("Requests per minute (empty: unlimited)", min=1, precision=0),
            "tokensPerMinute": ui.number("Tokens per minute (empty: unlimited)", min=1, precision=0),
        }
        for element in inputs.values():
            element.classes("w-full")

        async def create() -> None:
            request, errors = key_request({name: el.value for name, el in inputs.items()}, datetime.now(UTC))
            for name, element in inputs.items():
                element.error = errors.get(name)
            if request is None:
                return
            try:
                created = await actions.create_key(portal.services, request, PORTAL_ACTOR)
            except Exception as exc:
                # Under its field (the name's input for any other), else as /api words it.
                show_under_field(exc, inputs, fallback=inputs["name"])
                return
            dialog.close()
            _show_secret(dialogs, created)
            await refresh()

        with ui.row().classes("w-full justify-end"):
            ui.button("Cancel", on_click=dialog.close).props("flat")
            testid(ui.button("Create", on_click=create), "confirm-create-key")
    dialog.open()


def _show_secret(dialogs: ui.element, created: ApiKeyCreated) -> None:
    with dialogs, ui.dialog().props("persistent") as dialog, ui.card().classes("w-[36rem] gap-2"):
        ui.label(f"Key {created.name} created").classes("text-h6")
        ui.label("Copy it now: it is shown this once and never stored in clear.").classes("text-warning")
        testid(code_block(created.secret, language=None).classes("w-full"), "new-key-secret")
        with ui.row().classes("w-full justify-end"):
            testid(ui.button("I have copied it", on_click=dialog.close), "close-secret")
    dialog.open()


def _confirm_revoke(portal: Portal, dialogs: ui.element, key: ApiKeyInfo, refresh: Any) -> None:
    with dialogs, ui.dialog() as dialog, ui.card():
        ui.label(f"Revoke {key.name}?").classes("text-h6")
        ui.label("Requests with this key are refused from now on; its record and usage stay.")

        async def revoke() -> None:
            dialog.close()
            if (
                await act(
                    actions.revoke_key(portal.services, key.id, PORTAL_ACTOR), done=f"{key.name} revoked"
                )
                is REFUSED
            ):
                return
            await refresh()

        with ui.row().classes("w-full justify-end"):
            ui.button("Cancel", on_click=dialog.close).props("flat")
            testid(ui.button("Revoke", on_click=revoke).props("color=negative"), "confirm-revoke")
    dialog.open()


def _snippet_card(url: str, names: list[str], chosen: str) -> None:
    with ui.card().classes("w-full"):
        with ui.row().classes("w-full items-center"):
            ui.label("Connect a client").classes("text-h6")
            ui.space()
            model = ui.select(names or [chosen], value=chosen, label="Model")
            testid(model.classes("w-64"), "snippet-model")
        testid(ui.label(f"Endpoint: {url} (OpenAI-compatible)").classes("text-caption"), "endpoint")
        with ui.tabs() as tabs:
            for name in SNIPPET_LANGUAGES:
                ui.tab(
                    name,
                    label={
                        "curl": "curl",
                        "python": "Python (openai)",
                        "javascript": f"JavaScript ({JAVASCRIPT_FILE_NAME})",
                    }[name],
                )
        codes: dict[str, ui.code] = {}
        with ui.tab_panels(tabs, value="curl").classes("w-full"):
            for name, language in SNIPPET_LANGUAGES.items():
                with ui.tab_panel(name):
                    codes[name] = code_block(
                        snippets(url, str(model.value))[name], language=language
                    ).classes("w-full")

        def update() -> None:
            for name, text in snippets(url, str(model.value)).items():
                codes[name].set_content(text)

        model.on_value_change(update)
