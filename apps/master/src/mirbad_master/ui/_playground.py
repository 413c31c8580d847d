"""The Playground: chat with any Ready model through the master's router, streamed, with its speed."""

from __future__ import annotations

import time
from typing import Final

from nicegui import ui

from mirbad_protocol import ModelState

from ._chat import ChatDone, ChatError, ChatRequest, stream_chat
from ._fleet import FleetSnapshot, fleet_snapshot
from ._format import count, per_second
from ._marks import testid
from ._portal import Portal

__all__ = [
    "MAX_TOKENS_CAP",
    "UPDATE_INTERVAL_S",
    "default_max_tokens",
    "done_text",
    "refusal_text",
    "render_playground",
]

UPDATE_INTERVAL_S: Final = 0.05
"""The answer on the page is redrawn at most this often while it streams (a fast model sends more)."""
MAX_TOKENS_CAP: Final = 1024
"""The longest default answer, whatever the model's context."""


def default_max_tokens(max_model_len: int | None) -> int:
    """The Max tokens a model starts with: a quarter of its context, at most :data:`MAX_TOKENS_CAP`.

    The prompt and the answer share the context: a default equal to the whole context (256 tokens on a
    small model) leaves no room for the conversation, and the second turn is refused.
    """
    if max_model_len is None:
        return MAX_TOKENS_CAP
    return max(1, min(MAX_TOKENS_CAP, max_model_len // 4))


def refusal_text(error: ChatError) -> str:
    """``Refused (400): the prompt is longer than the context``: what the conversation shows."""
    return f"Refused ({error.status}): {error.message}"


def done_text(done: ChatDone) -> str:
    """``128 tokens · 42.0 tok/s · first token after 120 ms``."""
    parts = [count(done.tokens, "token"), per_second(done.tokens_per_second)]
    if done.first_token_s is not None:
        parts.append(f"first token after {done.first_token_s * 1000:.0f} ms")
    return " · ".join(parts)


async def render_playground(portal: Portal) -> None:
    """Build the Playground into the current container."""
    snapshot = await fleet_snapshot(portal.services)
    names = snapshot.ready_names
    contexts = _contexts(snapshot)
    history: list[dict[str, str]] = []
    ui.label("Playground").classes("text-h5")
    with ui.row().classes("w-full gap-4 items-start no-wrap"):
        with ui.card().classes("w-80 shrink-0 gap-2"):
            model = ui.select(names, label="Model (Ready only)", value=names[0] if names else None)
            testid(model.classes("w-full"), "chat-model")
            system = ui.textarea("System prompt", value="You are a helpful assistant.").classes("w-full")
            testid(system.props("autogrow"), "system-prompt")
            temperature = ui.slider(min=0, max=2, step=0.1, value=0.7).props("label-always")
            ui.label().bind_text_from(temperature, "value", lambda value: f"Temperature {value:.1f}")
            max_tokens = ui.number(
                "Max tokens", value=default_max_tokens(contexts.get(str(model.value))), min=1, precision=0
            )
            testid(max_tokens.classes("w-full"), "chat-max-tokens")
            clear = ui.button("Clear chat", icon="delete_sweep")
            ui.button(
                "Refresh models", icon="refresh", on_click=lambda: _reload_models(portal, model, contexts)
            ).props("flat")
        with ui.column().classes("grow gap-2"):
            transcript = testid(ui.column().classes("w-full gap-2"), "transcript")
            if not names:
                ui.label("No model is Ready: start one on the Models page.").classes("text-grey-7")
            with ui.row().classes("w-full items-center no-wrap"):
                prompt = testid(
                    ui.input(placeholder="Say something…").classes("grow").props("outlined"), "chat-input"
                )
                send = testid(ui.button("Send", icon="send"), "chat-send")
            stats = testid(ui.label("").classes("text-caption text-grey-7"), "chat-stats")

    async def ask() -> None:
        text = (prompt.value or "").strip()
        if not text or not model.value:
            ui.notify("Pick a Ready model and write a message.", type="warning")
            return
        prompt.set_value("")
        send.disable()
        history.append({"role": "user", "content": text})
        with transcript:
            ui.chat_message(text, name="You", sent=True)
            answer = testid(ui.chat_message(name=str(model.value)), "chat-answer")
            with answer:
                shown = ui.label("").classes("whitespace-pre-wrap")
        stats.set_text("…")
        parts: list[str] = []
        last_draw = 0.0

        def piece(more: str) -> None:
            nonlocal last_draw
            parts.append(more)
            if time.monotonic() - last_draw >= UPDATE_INTERVAL_S:
                shown.set_text("".join(parts))
                last_draw = time.monotonic()

        request = ChatRequest(
            model=str(model.value),
            messages=list(history),
            system_prompt=system.value or "",
            temperature=float(temperature.value),
            max_tokens=int(max_tokens.value or default_max_tokens(contexts.get(str(model.value)))),
        )
        try:
            outcome = await stream_chat(portal.router, request, piece)
        finally:
            send.enable()
        shown.set_text("".join(parts))
        if isinstance(outcome, ChatError):
            if not parts:
                answer.delete()  # an empty bubble would read as an empty answer
            with transcript:
                _refusal(outcome)
            stats.set_text("")
            history.pop()
            return
        history.append({"role": "assistant", "content": "".join(parts)})
        stats.set_text(done_text(outcome))

    def clear_chat() -> None:
        history.clear()
        transcript.clear()
        stats.set_text("")

    def model_changed() -> None:
        # Each model gets its own default: a small model's context cannot hold another's.
        max_tokens.set_value(default_max_tokens(contexts.get(str(model.value))))

    model.on_value_change(model_changed)
    clear.on_click(clear_chat)
    send.on_click(ask)
    prompt.on("keydown.enter", ask)


def _contexts(snapshot: FleetSnapshot) -> dict[str, int]:
    """Each Ready model's context length, by served name."""
    return {
        row.view.definition.served_name: row.view.definition.max_model_len
        for row in snapshot.models
        if row.state is ModelState.READY
    }


def _refusal(error: ChatError) -> None:
    message = ui.chat_message(name="Mirbad").props("bg-color=red-1 text-color=negative")
    with testid(message, "chat-error"), ui.row().classes("items-center no-wrap gap-2"):
        ui.icon("error", size="sm").classes("text-negative")
        ui.label(refusal_text(error)).classes("whitespace-pre-wrap")


async def _reload_models(portal: Portal, model: ui.select, contexts: dict[str, int]) -> None:
    snapshot = await fleet_snapshot(portal.services)
    names = snapshot.ready_names
    contexts.clear()
    contexts.update(_contexts(snapshot))
    model.set_options(names, value=model.value if model.value in names else (names[0] if names else None))
