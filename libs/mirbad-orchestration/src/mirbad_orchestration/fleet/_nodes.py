"""The node registry: every node of the fleet and how to reach its agent, kept in ``{data_dir}/nodes.json``.

Each record says where the node's agent listens (``https://host:9443``) and which certificate it must
present there: the common name the CA certified at enrollment and, optionally, the pin of its key. A
fleet of one has a single record, the local node (:data:`LOCAL_NODE_ID`), whose agent the master starts
itself on loopback.

Fail closed, like the model registry: an unreadable file raises :class:`NodeRegistryError` on every call
and is never overwritten, because a master that forgot its nodes would strand their models.
"""

from __future__ import annotations

import builtins
import contextlib
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Final, Literal
from urllib.parse import urlsplit

import anyio
import anyio.to_thread
from pydantic import Field, ValidationError, field_validator

from mirbad_orchestration.exceptions import DuplicateNodeError, NodeRegistryError, UnknownNodeError
from mirbad_orchestration.stores import is_disk_full
from mirbad_protocol import DEFAULT_AGENT_PORT, WireModel, remove_stale_temp_files, write_json_atomic

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

_FILE_MODE: Final = 0o644  # no secret here: certificates and keys live in their own files


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

    One :class:`anyio.Lock` serializes every read-modify-write; file I/O runs in a worker thread. The
    registry must be the only writer of its file. A missing file is an empty fleet.

    Args:
        data_dir: the data directory; the file is ``data_dir / "nodes.json"``.
    """

    def __init__(self, data_dir: Path) -> None:
        self._path = data_dir / NODES_FILE_NAME
        self._lock = anyio.Lock()
        self._nodes: builtins.list[NodeRecord] | None = None

    @property
    def path(self) -> Path:
        """The registry file."""
        return self._path

    async def list(self) -> builtins.list[NodeRecord]:
        """Every node, in id order.

        Raises:
            NodeRegistryError: the file cannot be read.
        """
        async with self._lock:
            return builtins.list(await self._loaded())

    async def get(self, node_id: str) -> NodeRecord:
        """The node ``node_id``.

        Raises:
            UnknownNodeError: no node has that id.
            NodeRegistryError: the file cannot be read.
        """
        async with self._lock:
            return _find(await self._loaded(), node_id)

    async def add(self, record: NodeRecord) -> NodeRecord:
        """Register a new node.

        Raises:
            DuplicateNodeError: a node with that id, or another one at the same agent URL, exists.
            NodeRegistryError: the file cannot be read or written; nothing changed.
        """
        async with self._lock:
            nodes = await self._loaded()
            if any(node.id == record.id for node in nodes):
                raise DuplicateNodeError(record.id, f"a node with id {record.id!r} is already registered")
            _check_unique(nodes, record)
            await self._save([*nodes, record])
        return record

    async def update(self, record: NodeRecord) -> NodeRecord:
        """Replace the registered node with ``record``'s id (a new URL, pin or labels).

        Raises:
            UnknownNodeError: no node has that id.
            DuplicateNodeError: another node already has that agent URL, or is the local node.
            NodeRegistryError: the file cannot be read or written; nothing changed.
        """
        async with self._lock:
            nodes = await self._loaded()
            _find(nodes, record.id)
            others = [node for node in nodes if node.id != record.id]
            _check_unique(others, record)
            await self._save([*others, record])
        return record

    async def remove(self, node_id: str) -> NodeRecord:
        """Unregister the node ``node_id`` and return its record.

        Raises:
            UnknownNodeError: no node has that id.
            NodeRegistryError: the file cannot be read or written; nothing changed.
        """
        async with self._lock:
            nodes = await self._loaded()
            removed = _find(nodes, node_id)
            await self._save([node for node in nodes if node.id != node_id])
        return removed

    async def ensure_local(self, agent_url: str, certificate_name: str) -> NodeRecord:
        """Register (or correct) the local node: the agent the master runs on its own machine.

        Called at every start of a fleet of one, so a changed port or certificate name is picked up;
        the local node's labels and enrollment time are kept.

        Raises:
            DuplicateNodeError: another node is registered at that agent URL.
            NodeRegistryError: the file cannot be read or written.
        """
        async with self._lock:
            nodes = await self._loaded()
            current = next((node for node in nodes if node.id == LOCAL_NODE_ID), None)
            wanted = NodeRecord(
                id=LOCAL_NODE_ID,
                name=current.name if current else LOCAL_NODE_ID,
                agent_url=agent_url,
                certificate_name=certificate_name,
                enrolled_at=current.enrolled_at if current else datetime.now(UTC),
                labels=current.labels if current else {},
                local=True,
            )
            if wanted != current:
                others = [node for node in nodes if node.id != LOCAL_NODE_ID]
                _check_unique(others, wanted)
                await self._save([*others, wanted])
        return wanted

    async def _loaded(self) -> builtins.list[NodeRecord]:
        # A failed load is not cached: once the file is fixed by hand the next call reads it.
        if self._nodes is None:
            self._nodes = await anyio.to_thread.run_sync(self._load)
        return self._nodes

    async def _save(self, nodes: builtins.list[NodeRecord]) -> None:
        ordered = sorted(nodes, key=lambda node: node.id)
        document = _NodesFile(nodes=ordered).model_dump(mode="json", by_alias=True, exclude_none=True)
        # Shielded: once the write started, memory must follow the file even if the caller is cancelled.
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(partial(self._write, document))
            self._nodes = ordered

    def _load(self) -> builtins.list[NodeRecord]:
        with contextlib.suppress(OSError):
            remove_stale_temp_files(self._path)
        try:
            raw = self._path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise NodeRegistryError(self._path, f"cannot read it: {exc.strerror or exc}") from exc
        return _decode(self._path, raw)

    def _write(self, document: dict[str, Any]) -> None:
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(self._path, document, mode=_FILE_MODE)
        except OSError as exc:
            reason = f"cannot write it: {exc.strerror or exc}"
            raise NodeRegistryError(self._path, reason, disk_full=is_disk_full(exc)) from exc


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
