"""What the forwarding core's two senders share about one send: httpcore's and aiohttp's.

The core (:mod:`._forward`) sends on the lean pool with httpcore, or, in the master, on an aiohttp
session (:mod:`._aiohttp_sender`). Both record whether an attempt opened its own connection, both
raise httpcore's "no response" error in the same words (the cue for sending a request again on a
stale pooled connection), and both keep parsed upstream URLs in a cache of one size. These live here
so that neither sender imports the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

# The router's own plumbing: nothing here is part of its public API.
__all__: list[str] = []

NO_RESPONSE: Final = "Server disconnected without sending a response"
"""httpcore's message for a connection closed before the first byte of a response."""
PARSED_URLS: Final = 512
"""How many upstream URLs stay parsed (the least recently used go first; a query string makes its own)."""


class Attempt:
    """What httpcore's trace says about one attempt: whether it opened its own connection."""

    def __init__(self) -> None:
        self.connected = False

    async def trace(self, event: str, info: Mapping[str, Any]) -> None:
        if event.startswith("connection.connect_tcp."):
            self.connected = True
