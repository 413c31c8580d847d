"""Supervision: starting, stopping and restarting models, by hand and on their own.

:class:`ModelControl` in ``supervision/_lifecycle.py`` is the start/stop/restart path every caller uses
(the admin API, the portal and the health monitor). :class:`StartLanes` keep one start per node at a
time; :class:`HealthMonitor` autostarts models, restarts crashed ones (with :class:`RestartPauses` after
too many crashes), unloads idle ones and relaunches what ran before a restart (:class:`RecoveryState`);
:class:`HealthSettings` holds its intervals and thresholds.
"""

from ._health_monitor import HealthMonitor
from ._health_settings import (
    AUTOSTART_ACTOR,
    IDLE_UNLOAD_ACTOR,
    DefinitionSource,
    HealthSettings,
    LastUsed,
    SkipCheck,
)
from ._lifecycle import ModelControl
from ._recovery_state import RECOVERY_FILE_NAME, RecoveryState
from ._restart_pauses import RESTART_PAUSES_FILE_NAME, RestartPause, RestartPauses
from ._start_lanes import DEFAULT_LANE_WAIT, StartLanes

__all__ = [
    "AUTOSTART_ACTOR",
    "DEFAULT_LANE_WAIT",
    "IDLE_UNLOAD_ACTOR",
    "RECOVERY_FILE_NAME",
    "RESTART_PAUSES_FILE_NAME",
    "DefinitionSource",
    "HealthMonitor",
    "HealthSettings",
    "LastUsed",
    "ModelControl",
    "RecoveryState",
    "RestartPause",
    "RestartPauses",
    "SkipCheck",
    "StartLanes",
]
