"""Fencing on the master-agent wire: the two headers a master's command carries, and how they read.

Every command a master sends an agent (a start, a stop, a download, a host action ...) names the
master's instance id and fencing epoch in :data:`MASTER_ID_HEADER` and :data:`MASTER_EPOCH_HEADER`.
The agent keeps the highest epoch it has seen and refuses a command from an older one with
``fenced`` (409), so a stale or second master cannot drive the fleet; reads carry the headers too
and are never refused for them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from ._wire import WireModel
from .exceptions import InvalidFieldError

__all__ = [
    "MASTER_EPOCH_HEADER",
    "MASTER_ID_HEADER",
    "MAX_MASTER_EPOCH",
    "ROUTE_FENCE",
    "FenceState",
    "MasterFence",
    "fence_headers",
    "parse_fence_headers",
]

MASTER_ID_HEADER: Final = "x-mirbad-master-id"
"""The header naming the commanding master's instance id."""
MASTER_EPOCH_HEADER: Final = "x-mirbad-master-epoch"
"""The header carrying the commanding master's fencing epoch (a decimal integer)."""
MAX_MASTER_EPOCH: Final = 2**63 - 1
"""The highest epoch read: an epoch fits a signed 64-bit integer wherever it is kept."""
ROUTE_FENCE: Final = "/fence"
"""``GET``: the master the agent follows; ``POST`` (a command, so fenced): claim the node for the master
the request names, raising the agent's fence to its epoch (a takeover claims every node at once)."""

# Visible ASCII only: a header value cannot carry more, and a space would make the id ambiguous in logs.
_INSTANCE_ID: Final = re.compile(r"[\x21-\x7e]{1,200}")
_EPOCH: Final = re.compile(r"[0-9]{1,19}")


@dataclass(frozen=True)
class MasterFence:
    """A master as its command names it.

    Attributes:
        instance_id: the master's instance id (made once at its first start).
        epoch: its fencing epoch.
    """

    instance_id: str
    epoch: int


class FenceState(WireModel):
    """The master an agent follows: the instance id and epoch of the newest command it took.

    Attributes:
        instance_id: that master's instance id (None: no command has named a master yet).
        epoch: its epoch, the lowest the agent still takes commands from (None: none yet).
    """

    instance_id: str | None = None
    epoch: int | None = None


def fence_headers(fence: MasterFence) -> dict[str, str]:
    """The headers that carry ``fence`` on a request."""
    return {MASTER_ID_HEADER: fence.instance_id, MASTER_EPOCH_HEADER: str(fence.epoch)}


def parse_fence_headers(headers: Mapping[str, str]) -> MasterFence | None:
    """The master a request names, or None when it carries neither header.

    ``headers`` is looked up with the lower-case names (Starlette's and httpx's header maps are
    case-insensitive).

    Raises:
        InvalidFieldError: one header without the other, an empty or non-ASCII instance id, or an epoch
            that is not a decimal integer from 0 to :data:`MAX_MASTER_EPOCH` (``field`` names the header).
    """
    instance_id = headers.get(MASTER_ID_HEADER)
    epoch = headers.get(MASTER_EPOCH_HEADER)
    if instance_id is None and epoch is None:
        return None
    if instance_id is None:
        raise InvalidFieldError(MASTER_ID_HEADER, f"required with {MASTER_EPOCH_HEADER}")
    if epoch is None:
        raise InvalidFieldError(MASTER_EPOCH_HEADER, f"required with {MASTER_ID_HEADER}")
    if _INSTANCE_ID.fullmatch(instance_id) is None:
        raise InvalidFieldError(MASTER_ID_HEADER, "must be 1 to 200 visible ASCII characters")
    if _EPOCH.fullmatch(epoch) is None or int(epoch) > MAX_MASTER_EPOCH:
        reason = f"must be a decimal integer from 0 to {MAX_MASTER_EPOCH}"
        raise InvalidFieldError(MASTER_EPOCH_HEADER, reason)
    return MasterFence(instance_id=instance_id, epoch=int(epoch))
