"""mirbad_hostd: the root daemon behind the Services page, reached by the agent over a unix socket.

It lists and controls whitelisted systemd units (never one on the hard deny list), discovers the
host's units, reports GPU processes with their container or unit, and mounts the backup share at
its fixed target. docs/hostd.md has the API.
"""

from ._app import MAX_BODY_BYTES, create_app
from ._backup_mount import BackupMount
from ._deny import BUILT_IN_DENY_PATTERNS, TEMPLATE_INSTANCE_PATTERN, DenyList, load_deny_list, template_of
from ._discovery import UnitState, discover_units, read_states, unit_state
from ._gpu import (
    GPU_CACHE_S,
    GPU_QUERY_ARGS,
    CgroupOwner,
    GpuProcesses,
    GpuProcessRow,
    cgroup_owner,
    parse_compute_apps,
)
from ._mount_render import (
    MANAGED_MARKER,
    mount_options,
    mount_source,
    mount_unit_name,
    render_credentials,
    render_mount_unit,
)
from ._probe_write import probe_write_as
from ._serve import bind_socket, compose, run_hostd
from ._services import CONFIRMED_ACTIONS, HostServices
from ._settings import HostdSettings, load_settings
from ._systemctl import SHOW_PROPERTIES, Manager, Systemctl, parse_show, parse_table_json
from ._trusted_files import check_trusted, read_trusted_json
from ._whitelist import Seed, WhitelistStore, read_seed

__all__ = [
    "BUILT_IN_DENY_PATTERNS",
    "CONFIRMED_ACTIONS",
    "GPU_CACHE_S",
    "GPU_QUERY_ARGS",
    "MANAGED_MARKER",
    "MAX_BODY_BYTES",
    "SHOW_PROPERTIES",
    "TEMPLATE_INSTANCE_PATTERN",
    "BackupMount",
    "CgroupOwner",
    "DenyList",
    "GpuProcessRow",
    "GpuProcesses",
    "HostServices",
    "HostdSettings",
    "Manager",
    "Seed",
    "Systemctl",
    "UnitState",
    "WhitelistStore",
    "bind_socket",
    "cgroup_owner",
    "check_trusted",
    "compose",
    "create_app",
    "discover_units",
    "load_deny_list",
    "load_settings",
    "mount_options",
    "mount_source",
    "mount_unit_name",
    "parse_compute_apps",
    "parse_show",
    "parse_table_json",
    "probe_write_as",
    "read_seed",
    "read_states",
    "read_trusted_json",
    "render_credentials",
    "render_mount_unit",
    "run_hostd",
    "template_of",
    "unit_state",
]
