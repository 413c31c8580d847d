"""mirbad_client: a typed client of the Mirbad master's admin API, for scripts and notebooks.

:class:`MirbadClient` (blocking) and :class:`AsyncMirbadClient` (anyio) have the same methods, one
per route of ``/api``. Results are the admin API's wire models (defined in :mod:`mirbad_protocol` and
re-exported here); refusals are :mod:`mirbad_client.exceptions`, one class per error code. It needs
nothing of the master but its URL and the administrator password. It is not on a package index:
install it from a clone, ``python3 -m pip install ./libs/mirbad-protocol ./libs/mirbad-client``.
"""

from mirbad_protocol.admin import (
    EnrollmentTokenIssued,
    MaintenanceView,
    ModelView,
    NodeSummary,
    RestartPause,
    SettingChangeView,
    StatusReport,
)

from ._async_client import AsyncMirbadClient
from ._client import MirbadClient
from .exceptions import (
    AdminApiError,
    AdminAuthError,
    AdminConnectionError,
    AdmissionRefusedError,
    FleetNodeError,
    InvalidRequestError,
    LaunchSpecRejectedError,
    LogFollowError,
    MirbadClientError,
    ModelFailedError,
    NodeBadAnswerError,
    NodeExistsError,
    NodeOfflineError,
    NodeRefusedError,
    NodeTimedOutError,
    NoSuchApiKeyError,
    NoSuchModelError,
    NoSuchNodeError,
    ServedNameTakenError,
    StartBlockedError,
    StartRefusedError,
)

__all__ = [
    "AdminApiError",
    "AdminAuthError",
    "AdminConnectionError",
    "AdmissionRefusedError",
    "AsyncMirbadClient",
    "EnrollmentTokenIssued",
    "FleetNodeError",
    "InvalidRequestError",
    "LaunchSpecRejectedError",
    "LogFollowError",
    "MaintenanceView",
    "MirbadClient",
    "MirbadClientError",
    "ModelFailedError",
    "ModelView",
    "NoSuchApiKeyError",
    "NoSuchModelError",
    "NoSuchNodeError",
    "NodeBadAnswerError",
    "NodeExistsError",
    "NodeOfflineError",
    "NodeRefusedError",
    "NodeSummary",
    "NodeTimedOutError",
    "RestartPause",
    "ServedNameTakenError",
    "SettingChangeView",
    "StartBlockedError",
    "StartRefusedError",
    "StatusReport",
]
