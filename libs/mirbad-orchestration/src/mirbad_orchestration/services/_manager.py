"""The master's host services: the calls go to the node's agent; the whitelist checks stay here.

Units are whitelisted in each node's hostd (which checks the deny list and confirmations again);
containers are whitelisted here, in ``host-services.json``, and any action on a container not in it is
refused before the node is asked. Protected services need their name typed for stop, restart and
autostart-off, checked here first. Whitelist changes take the principal of a signed-in administrator
session, which the caller resolves from the request itself; without one they are refused.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

from mirbad_orchestration.exceptions import (
    ContainerNotWhitelistedError,
    HostServiceConfirmError,
    WhitelistChangeRefusedError,
)
from mirbad_orchestration.fleet import AgentClient
from mirbad_protocol.agent import (
    ContainerAction,
    ContainerActionResult,
    ContainerService,
    ContainerServiceList,
    RestartPolicy,
)
from mirbad_protocol.hostd import (
    HostdAction,
    HostdActionResult,
    ServiceList,
    WhitelistAdd,
    WhitelistEntry,
    WhitelistUpdate,
)

from ._store import HostServicesDocument, HostServicesStore, WhitelistedContainer, policy_key

__all__ = ["HostServiceManager"]

_CONFIRMED_UNIT_ACTIONS: Final = frozenset({"stop", "restart", "disable"})
_CONFIRMED_CONTAINER_ACTIONS: Final = frozenset({"stop", "restart"})
_DEFAULT_POLICY: Final = RestartPolicy(name="unless-stopped")


class HostServiceManager:
    """Host services across the fleet.

    Args:
        store: the container whitelist and remembered policies.
        client_for: the agent client of a node (raises ``UnknownNodeError`` for an unknown one).
    """

    def __init__(self, store: HostServicesStore, client_for: Callable[[str], Awaitable[AgentClient]]) -> None:
        self._store = store
        self._client_for = client_for

    async def units(self, node: str, *, include_all: bool = False) -> ServiceList:
        """The node's whitelisted units (with ``include_all`` discovery and the deny list)."""
        return await (await self._client_for(node)).host_services(include_all=include_all)

    async def containers(self, node: str) -> tuple[list[WhitelistedContainer], ContainerServiceList]:
        """The node's container whitelist entries and every container it could whitelist."""
        document = await self._store.read()
        listing = await (await self._client_for(node)).host_containers()
        return [c for c in document.containers if c.node == node], listing

    async def unit_action(
        self, node: str, name: str, action: HostdAction, *, confirm: str | None = None
    ) -> HostdActionResult:
        """Queue ``action`` on a whitelisted unit; a protected one's stop/restart/disable needs ``confirm``.

        hostd checks the confirmation again; the master's check spares the node a refused call.
        """
        client = await self._client_for(node)
        if action in _CONFIRMED_UNIT_ACTIONS and confirm != name:
            listing = await client.host_services()
            entry = next((s.entry for s in listing.services if s.entry.name == name), None)
            if entry is not None and entry.protected:
                raise HostServiceConfirmError(name)
        return await client.host_service_action(name, action, confirm=confirm)

    async def container_action(
        self, node: str, name: str, action: ContainerAction, *, confirm: str | None = None
    ) -> ContainerActionResult:
        """Start, stop or restart a whitelisted container (a protected one's stop/restart needs ``confirm``).

        Raises:
            ContainerNotWhitelistedError: the container is not on the whitelist.
            HostServiceConfirmError: a protected container without its typed name.
            HostServicesFileError: the whitelist file is unreadable (fails closed).
        """
        entry = await self._whitelisted(node, name)
        client = await self._client_for(node)
        await self._check_bound(node, entry, client)
        if entry.protected and action in _CONFIRMED_CONTAINER_ACTIONS and confirm != name:
            raise HostServiceConfirmError(name)
        return await client.host_container_action(name, action)

    async def container_autostart(
        self, node: str, name: str, enabled: bool, *, confirm: str | None = None
    ) -> ContainerService:
        """Turn a whitelisted container's autostart on or off.

        Off remembers its policy in the file; on restores it (``unless-stopped`` when none was
        remembered). A protected container's autostart-off needs ``confirm``.
        """
        entry = await self._whitelisted(node, name)
        client = await self._client_for(node)
        await self._check_bound(node, entry, client)
        key = policy_key(node, name)
        if not enabled:
            if entry.protected and confirm != name:
                raise HostServiceConfirmError(name)
            current = next((c for c in (await client.host_containers()).containers if c.name == name), None)
            if current is not None and current.autostart:
                policy = current.restart_policy

                def remember(document: HostServicesDocument) -> HostServicesDocument:
                    return document.model_copy(
                        update={"restart_policies": {**document.restart_policies, key: policy}}
                    )

                await self._store.update(remember)
            return await client.host_container_restart_policy(name, RestartPolicy(name="no"))
        remembered = (await self._store.read()).restart_policies.get(key, _DEFAULT_POLICY)
        return await client.host_container_restart_policy(name, remembered)

    async def add_unit(self, node: str, request: WhitelistAdd, *, principal: str | None) -> WhitelistEntry:
        """Whitelist a unit on the node's hostd, for a signed-in administrator (``principal``)."""
        _require(principal)
        return await (await self._client_for(node)).host_whitelist_add(request)

    async def update_unit(
        self, node: str, name: str, request: WhitelistUpdate, *, principal: str | None
    ) -> WhitelistEntry:
        """Change a unit's whitelist entry; unprotecting needs the session and the typed name."""
        _require(principal)
        if request.protected is False and request.confirm != name:
            raise HostServiceConfirmError(name)
        return await (await self._client_for(node)).host_whitelist_update(name, request)

    async def remove_unit(self, node: str, name: str, *, principal: str | None) -> WhitelistEntry:
        """Remove a unit from the node's hostd whitelist."""
        _require(principal)
        return await (await self._client_for(node)).host_whitelist_remove(name)

    async def add_container(
        self,
        node: str,
        name: str,
        *,
        confirm: str | None,
        principal: str | None,
        display_name: str = "",
        protected: bool = False,
    ) -> WhitelistedContainer:
        """Whitelist a container of the node (it must be one the agent lists), with its typed name."""
        _require(principal)
        if confirm != name:
            raise HostServiceConfirmError(name)
        listing = await (await self._client_for(node)).host_containers()
        found = next((c for c in listing.containers if c.name == name), None)
        if found is None:
            raise ContainerNotWhitelistedError(node, name)
        entry = WhitelistedContainer(
            node=node, name=name, display_name=display_name, protected=protected, container_id=found.id
        )

        def add(document: HostServicesDocument) -> HostServicesDocument:
            others = [c for c in document.containers if (c.node, c.name) != (node, name)]
            return document.model_copy(update={"containers": [*others, entry]})

        await self._store.update(add)
        return entry

    async def update_container(
        self,
        node: str,
        name: str,
        *,
        principal: str | None,
        protected: bool | None = None,
        display_name: str | None = None,
        confirm: str | None = None,
    ) -> WhitelistedContainer:
        """Change a container's entry; unprotecting needs the session and the typed name."""
        _require(principal)
        entry = await self._whitelisted(node, name)
        if protected is False and entry.protected and confirm != name:
            raise HostServiceConfirmError(name)
        changes: dict[str, object] = {}
        if protected is not None:
            changes["protected"] = protected
        if display_name is not None:
            changes["display_name"] = display_name
        updated = entry.model_copy(update=changes)

        def replace(document: HostServicesDocument) -> HostServicesDocument:
            kept = [updated if (c.node, c.name) == (node, name) else c for c in document.containers]
            return document.model_copy(update={"containers": kept})

        await self._store.update(replace)
        return updated

    async def remove_container(self, node: str, name: str, *, principal: str | None) -> WhitelistedContainer:
        """Take a container off the whitelist (its remembered policy goes with it)."""
        _require(principal)
        entry = await self._whitelisted(node, name)

        def remove(document: HostServicesDocument) -> HostServicesDocument:
            policies = {k: v for k, v in document.restart_policies.items() if k != policy_key(node, name)}
            kept = [c for c in document.containers if (c.node, c.name) != (node, name)]
            return document.model_copy(update={"containers": kept, "restart_policies": policies})

        await self._store.update(remove)
        return entry

    async def _check_bound(self, node: str, entry: WhitelistedContainer, client: AgentClient) -> None:
        """Refuse when the container now called ``entry.name`` is not the one whitelisted.

        A seeded entry (no id yet) binds the container holding the name at its first action.

        Raises:
            ContainerNotWhitelistedError: the name now belongs to another container, or to none.
        """
        current = next((c for c in (await client.host_containers()).containers if c.name == entry.name), None)
        if current is None:
            raise ContainerNotWhitelistedError(node, entry.name, replaced=bool(entry.container_id))
        if entry.container_id == current.id:
            return
        if entry.container_id:
            raise ContainerNotWhitelistedError(node, entry.name, replaced=True)
        bound = entry.model_copy(update={"container_id": current.id})

        def bind(document: HostServicesDocument) -> HostServicesDocument:
            kept = [bound if c == entry else c for c in document.containers]
            return document.model_copy(update={"containers": kept})

        await self._store.update(bind)

    async def _whitelisted(self, node: str, name: str) -> WhitelistedContainer:
        entry = (await self._store.read()).find(node, name)
        if entry is None:
            raise ContainerNotWhitelistedError(node, name)
        return entry


def _require(principal: str | None) -> None:
    if not principal:
        raise WhitelistChangeRefusedError(
            "whitelist changes need a signed-in administrator (a portal session or the password)"
        )
