"""The node registry: every node of the fleet and how to reach its agent, kept in ``{data_dir}/nodes.json``.

Each record says where the node's agent listens (``https://host:9443``) and which certificate it must
present there: the common name the CA certified at enrollment and, optionally, the pin of its key. A
fleet of one has a single record, the local node (:data:`LOCAL_NODE_ID`), whose agent the master starts
itself on loopback.

Fail closed, like the model registry: an unreadable file raises :class:`NodeRegistryError` on every call
and is never overwritten, because a master that forgot its nodes would strand their models. The file is
a :class:`~mirbad_orchestration.stores.StateFile` (one lock, atomic replace).
"""

from __future__ import annotations

import builtins
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Final, Literal
from urllib.parse import urlsplit

from pydantic import Field, ValidationError, field_validator

from mirbad_orchestration.exceptions import DuplicateNodeError, NodeRegistryError, UnknownNodeError
from mirbad_orchestration.stores import StateFile, StoreAction
from mirbad_protocol import WireModel
from mirbad_protocol.agent import DEFAULT_AGENT_PORT
from mirbad_protocol.support import BeforeReplace

__all__ = [
    "LOCAL_NODE_ID",
    "NODES_FILE_NAME",
    "NODE_ID_PATTERN",
    "NodeRecord",
    "NodeRegistry",
    "agent_url_for",
    "check_agent_url",
]

NODES_FILE_NAME: Final = "nodes.json"
"""The node registry's file name inside the data directory."""
LOCAL_NODE_ID: Final = "local"
"""The id of the node on the master's own machine (the only node of a fleet of one)."""
NODE_ID_PATTERN: Final = r"^[a-z0-9][a-z0-9._-]{0,62}$"
"""A node id: what ``Placement.node_id`` names; lowercase so ids compare exactly."""


class NodeRecord(WireModel):
    """One registered node.

    Attributes:
        id: the node's id, named by model placements.
        name: the node's name for people; also the certificate name unless ``certificate_name`` is set.
        agent_url: the agent's base URL, ``https://host:9443`` (no path).
        certificate_name: the common name the agent's certificate must carry (the enrolled node name);
            ``None`` means ``name``.
        pin_sha256: the ``pin-sha256`` of the agent certificate's key, when the operator pins it too.
        enrolled_at: when the node joined the fleet.
        labels: free-form labels for people and placement rules.
        local: whether this is the node on the master's own machine (the default node for models
            without a placement).
    """

    id: Annotated[str, Field(pattern=NODE_ID_PATTERN)]
    name: Annotated[str, Field(min_length=1, max_length=200)]
    agent_url: str
    certificate_name: str | None = None
    pin_sha256: Annotated[str, Field(pattern=r"^[A-Za-z0-9+/]{43}=$")] | None = None
    enrolled_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    labels: dict[str, str] = Field(default_factory=dict)
    local: bool = False

    @field_validator("agent_url")
    @classmethod
    def _check_agent_url(cls, value: str) -> str:
        return check_agent_url(value)

    @property
    def expected_certificate_name(self) -> str:
        """The common name the agent's certificate must carry."""
        return self.certificate_name or self.name


def check_agent_url(value: str) -> str:
    """``value`` as an agent URL (``https://host[:port]``, any trailing ``/`` dropped).

    Raises:
        ValueError: it is not https, has no host, or has a path, query, fragment or credentials.
    """
    parts = urlsplit(value)
    if parts.scheme != "https" or not parts.hostname:
        raise ValueError("an agent URL is https://host[:port]; agents only speak mutual TLS")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        raise ValueError("an agent URL has no path, query, fragment or credentials")
    return value.rstrip("/")


def agent_url_for(address: str, port: int = DEFAULT_AGENT_PORT) -> str:
    """The agent URL of a node reached at ``address`` (a host name or an IP address, IPv6 bracketed)."""
    host = f"[{address}]" if ":" in address else address
    return f"https://{host}:{port}"


class _NodesFile(WireModel):
    schema_version: Literal[1] = 1
    nodes: list[NodeRecord] = Field(default_factory=list)


class NodeRegistry:
    """The registered nodes, read once and written atomically on every change.

    One :class:`anyio.Lock` serializes every read-modify-write (the file is a
    :class:`~mirbad_orchestration.stores.StateFile`); file I/O runs in a worker thread. The registry
    must be the only writer of its file. A missing file is an empty fleet.

    Args:
        data_dir: the data directory; the file is ``data_dir / "nodes.json"``.
        before_replace: test seam passed to :func:`write_json_atomic`: called between writing the
            temporary file and replacing ``nodes.json``; raising there simulates a crash.
    """

    def __init__(self, data_dir: Path, *, before_replace: BeforeReplace | None = None) -> None:
        self._file: StateFile[builtins.list[NodeRecord]] = StateFile(
            data_dir / NODES_FILE_NAME,
            [],
            before_replace=before_replace,
            decode=_decode,
            encode=_encode,
            failure=_registry_error,
        )

    @property
    def path(self) -> Path:
        """The registry file."""
        return self._file.path

    async def list(self) -> builtins.list[NodeRecord]:
        """Every node, in id order.

        Raises:
            NodeRegistryError: the file cannot be read.
        """
        return builtins.list(await self._file.read())

    async def get(self, node_id: str) -> NodeRecord:
        """The node ``node_id``.

        Raises:
            UnknownNodeError: no node has that id.
            NodeRegistryError: the file cannot be read.
        """
        return _find(await self._file.read(), node_id)

    async def add(self, record: NodeRecord) -> NodeRecord:
        """Register a new node.

        Raises:
            DuplicateNodeError: a node with that id, or another one at the same agent URL, exists.
            NodeRegistryError: the file cannot be read or written; nothing changed.
        """

        def added(nodes: builtins.list[NodeRecord]) -> builtins.list[NodeRecord]:
            if any(node.id == record.id for node in nodes):
                raise DuplicateNodeError(record.id, f"a node with id {record.id!r} is already registered")
            _check_unique(nodes, record)
            return _ordered([*nodes, record])

        await self._file.update(added)
        return record

    async def update(self, record: NodeRecord) -> NodeRecord:
        """Replace the registered node with ``record``'s id (a new URL, pin or labels).

        Raises:
            UnknownNodeError: no node has that id.
            DuplicateNodeError: another node already has that agent URL, or is the local node.
            NodeRegistryError: the file cannot be read or written; nothing changed.
        """

        def replaced(nodes: builtins.list[NodeRecord]) -> builtins.list[NodeRecord]:
            _find(nodes, record.id)
            others = [node for node in nodes if node.id != record.id]
            _check_unique(others, record)
            return _ordered([*others, record])

        # Written even when nothing changed, as before: a save that was asked for reaches the disk.
        await self._file.update(replaced, write_unchanged=True)
        return record

    async def remove(self, node_id: str) -> NodeRecord:
        """Unregister the node ``node_id`` and return its record.

        Raises:
            UnknownNodeError: no node has that id.
            NodeRegistryError: the file cannot be read or written; nothing changed.
        """
        removed: builtins.list[NodeRecord] = []

        def dropped(nodes: builtins.list[NodeRecord]) -> builtins.list[NodeRecord]:
            removed.append(_find(nodes, node_id))
            return [node for node in nodes if node.id != node_id]

        await self._file.update(dropped)
        return removed[0]

    async def ensure_local(self, agent_url: str, certificate_name: str) -> NodeRecord:
        """Register (or correct) the local node: the agent the master runs on its own machine.

        Called at every start of a fleet of one, so a changed port or certificate name is picked up;
        the local node's labels and enrollment time are kept.

        Raises:
            DuplicateNodeError: another node is registered at that agent URL.
            NodeRegistryError: the file cannot be read or written.
        """
        wanted: builtins.list[NodeRecord] = []

        def corrected(nodes: builtins.list[NodeRecord]) -> builtins.list[NodeRecord]:
            current = next((node for node in nodes if node.id == LOCAL_NODE_ID), None)
            local = NodeRecord(
                id=LOCAL_NODE_ID,
                name=current.name if current else LOCAL_NODE_ID,
                agent_url=agent_url,
                certificate_name=certificate_name,
                enrolled_at=current.enrolled_at if current else datetime.now(UTC),
                labels=current.labels if current else {},
                local=True,
            )
            wanted.append(local)
            if local == current:
                return nodes
            others = [node for node in nodes if node.id != LOCAL_NODE_ID]
            _check_unique(others, local)
            return _ordered([*others, local])

        await self._file.update(corrected)
        return wanted[0]


def _ordered(nodes: list[NodeRecord]) -> list[NodeRecord]:
    return sorted(nodes, key=lambda node: node.id)


def _encode(nodes: list[NodeRecord]) -> dict[str, Any]:
    return _NodesFile(nodes=nodes).model_dump(mode="json", by_alias=True, exclude_none=True)


def _registry_error(path: Path, action: StoreAction, detail: str, disk_full: bool) -> Exception:
    return NodeRegistryError(path, f"cannot {action} it: {detail}", disk_full=disk_full)


def _decode(path: Path, raw: bytes) -> list[NodeRecord]:
    try:
        document = _NodesFile.model_validate_json(raw)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in error["loc"]) or "(document)"
        raise NodeRegistryError(path, f"invalid at {where}: {error['msg']}") from None
    nodes: list[NodeRecord] = []
    for record in document.nodes:
        if any(node.id == record.id for node in nodes):
            raise NodeRegistryError(path, f"node id {record.id!r} is registered twice")
        nodes.append(record)
    return sorted(nodes, key=lambda node: node.id)


def _find(nodes: list[NodeRecord], node_id: str) -> NodeRecord:
    for node in nodes:
        if node.id == node_id:
            return node
    raise UnknownNodeError(node_id)


def _check_unique(others: list[NodeRecord], record: NodeRecord) -> None:
    url = record.agent_url.casefold()
    for node in others:
        if node.agent_url.casefold() == url:
            raise DuplicateNodeError(
                record.id, f"node {node.id!r} is already registered at {record.agent_url}"
            )
        if record.local and node.local:
            raise DuplicateNodeError(record.id, f"node {node.id!r} is already the local node")
