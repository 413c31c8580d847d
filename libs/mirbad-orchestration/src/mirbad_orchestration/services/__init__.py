"""Host services on the master: the container whitelist file and the manager over the node agents.

:class:`HostServicesStore` keeps ``{data}/host-services.json`` (the container whitelist and the restart
policies autostart-on restores; seeded once, a corrupt file fails closed); :class:`HostServiceManager`
sends each call to the node's agent after the master's own checks (whitelist, confirmations, the
signed-in principal for whitelist changes).
"""

from ._manager import HostServiceManager
from ._store import (
    HOST_SERVICES_FILE_NAME,
    HostServicesDocument,
    HostServicesStore,
    WhitelistedContainer,
    policy_key,
)

__all__ = [
    "HOST_SERVICES_FILE_NAME",
    "HostServiceManager",
    "HostServicesDocument",
    "HostServicesStore",
    "WhitelistedContainer",
    "policy_key",
]
