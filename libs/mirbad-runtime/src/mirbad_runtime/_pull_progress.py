"""Docker's pull progress events summed into per-layer progress and one byte count.

Docker streams one JSON object per event: ``{"id": layer, "status": "Downloading", "progressDetail":
{"current", "total"}}`` while a layer downloads, other statuses around it (``Pulling fs layer``,
``Verifying Checksum``, ``Download complete``, ``Extracting``, ``Pull complete``, ``Already exists``),
lines without a layer for the image as a whole (``Pulling from ...``, ``Digest: ...``, ``Status: ...``)
and ``{"error": ...}`` when the pull fails (often with HTTP 200). Only the download counts toward the
bytes: extraction reports the same layer's bytes again, which would count it twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from mirbad_protocol.releases import LayerProgress

__all__ = ["PullProgress"]

# Statuses that say a layer's download is over (its bytes all count from then on).
_DOWNLOADED: Final = frozenset(
    {"Verifying Checksum", "Download complete", "Extracting", "Pull complete", "Already exists"}
)


@dataclass
class _Layer:
    status: str = ""
    current: int = 0
    total: int | None = None


class PullProgress:
    """The state of one pull as its events tell it (not thread-safe: the caller locks)."""

    def __init__(self) -> None:
        self._layers: dict[str, _Layer] = {}
        self.status: str | None = None
        """The last status line about the image as a whole."""
        self.error: str | None = None
        """Docker's error, once it sent one."""

    def apply(self, event: Mapping[str, Any]) -> None:
        """Take one decoded event (an unexpected shape is ignored: the stream is Docker's, not ours)."""
        if event.get("error"):
            detail = event.get("errorDetail")
            message = detail.get("message") if isinstance(detail, Mapping) else None
            self.error = str(message or event["error"])
            return
        status = str(event.get("status") or "")
        layer_id = event.get("id")
        if not isinstance(layer_id, str) or not layer_id or status.startswith("Pulling from"):
            if status:
                self.status = status
            return
        layer = self._layers.setdefault(layer_id, _Layer())
        layer.status = status
        detail = event.get("progressDetail")
        current, total = _numbers(detail if isinstance(detail, Mapping) else {})
        if status == "Downloading":
            layer.current = current if current is not None else layer.current
            layer.total = total if total is not None else layer.total
        elif status in _DOWNLOADED and layer.total is not None:
            layer.current = layer.total

    @property
    def current(self) -> int:
        """Bytes downloaded over the layers of known size."""
        return sum(min(layer.current, layer.total) for layer in self._layers.values() if layer.total)

    @property
    def total(self) -> int:
        """The sum of the known layer sizes."""
        return sum(layer.total for layer in self._layers.values() if layer.total)

    def layers(self) -> list[LayerProgress]:
        """Each layer's progress, in the order Docker first named them."""
        return [
            LayerProgress(
                id=layer_id, status=layer.status, current_bytes=layer.current, total_bytes=layer.total
            )
            for layer_id, layer in self._layers.items()
        ]


def _numbers(detail: Mapping[str, Any]) -> tuple[int | None, int | None]:
    current, total = detail.get("current"), detail.get("total")
    return (
        current if isinstance(current, int) and current >= 0 else None,
        total if isinstance(total, int) and total > 0 else None,
    )
