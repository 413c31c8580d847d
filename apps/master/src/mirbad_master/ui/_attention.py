"""The attention list: what an operator should look at now, and the count on the status-bar badge.

Five things need attention: a model whose automatic restarts are paused after crashes, a model that
failed (and is not paused: the pause already says it), a Ready model that makes no progress (Stalled) or
crawls (Slow), a running model whose saved settings wait for a restart, and a node the master cannot
reach. The list is built from the admin API's views, so the
Overview and the badge agree with ``/api`` at every moment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from mirbad_master._views import ModelView, NodeSummary
from mirbad_protocol import ModelState

from ._format import DASH

__all__ = ["AttentionItem", "AttentionKind", "attention_items"]

AttentionKind = Literal["paused", "failed", "stalled", "slow", "restart", "unreachable"]
"""Why an item is on the list."""

_ICONS: dict[AttentionKind, str] = {
    "paused": "pause_circle",
    "failed": "error",
    "stalled": "hourglass_disabled",
    "slow": "speed",
    "restart": "restart_alt",
    "unreachable": "cloud_off",
}


@dataclass(frozen=True)
class AttentionItem:
    """One line of the attention list.

    Attributes:
        kind: why it is listed.
        subject: the model or node id it is about.
        text: the sentence shown.
        link: the page that deals with it.
    """

    kind: AttentionKind
    subject: str
    text: str
    link: str

    @property
    def icon(self) -> str:
        """The Material icon of the item's kind."""
        return _ICONS[self.kind]


def attention_items(models: Sequence[ModelView], nodes: Sequence[NodeSummary]) -> list[AttentionItem]:
    """Every item needing attention: paused, failed, Stalled or Slow models, pending restarts, lost nodes."""
    items: list[AttentionItem] = []
    for view in models:
        item = _model_item(view)
        if item is not None:
            items.append(item)
    for node in nodes:
        if not node.reachable:
            reason = node.error or "it has not answered yet"
            items.append(
                AttentionItem("unreachable", node.id, f"Node {node.id} is unreachable: {reason}", "/nodes")
            )
    return items


def _model_item(view: ModelView) -> AttentionItem | None:
    model_id = view.definition.id
    link = f"/models?focus={model_id}"
    if view.pause is not None:
        error = _last_line(view.pause.last_error) or DASH
        text = f"Automatic restarts paused for {model_id} after {view.pause.crashes} crashes: {error}"
        return AttentionItem("paused", model_id, text, link)
    if view.status.state is ModelState.FAILED:
        error = _last_line(view.status.error) or "no error reported"
        return AttentionItem("failed", model_id, f"{model_id} failed: {error}", link)
    if view.status.progress is not None:
        reason = view.status.progress_reason or "no figures reported"
        kind: AttentionKind = "stalled" if view.status.progress == "Stalled" else "slow"
        return AttentionItem(kind, model_id, f"{model_id} is {view.status.progress}: {reason}", link)
    if view.restart_pending:
        count = sum(1 for change in view.changed_settings if change.needs_restart)
        detail = f" ({count} changed setting{'s' if count != 1 else ''})" if count else ""
        return AttentionItem("restart", model_id, f"{model_id}: restart pending{detail}", link)
    return None


def _last_line(text: str | None) -> str:
    if not text:
        return ""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""
