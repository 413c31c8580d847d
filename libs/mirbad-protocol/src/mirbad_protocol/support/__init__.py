"""mirbad_protocol.support: helpers every Mirbad process shares that are not part of the wire contract.

The protocol package is the one place every library and app may import, so the few helpers they all
need live beside it rather than in a package of their own; this subpackage keeps them apart from the
contract so that nothing here is mistaken for a wire shape or a route:

- atomic file writes (a reader sees the old file or the new one, never a torn mix);
- :func:`single_errors`, which turns a task group's exception group back into the one documented error;
- the readers of nvidia-smi's compute-apps rows and of a process's cgroup file (hostd and the agent
  read the same formats);
- the reader of ``/proc/self/mountinfo`` (hostd for the backup share's target, the master for whether
  its backup folder is on a network file system).

Their exceptions stay in the one tree of :mod:`mirbad_protocol.exceptions`.
"""

from ._atomic import (
    DEFAULT_FILE_MODE,
    BeforeReplace,
    remove_stale_temp_files,
    write_bytes_atomic,
    write_json_atomic,
)
from ._gpu_processes import COMPUTE_APPS_QUERY_ARGS, CgroupOwner, ComputeApp, cgroup_owner, read_compute_apps
from ._mountinfo import (
    NETWORK_FS_TYPES,
    MountEntry,
    escape_mountinfo,
    mount_at,
    mount_holding,
    parse_mountinfo,
)
from ._task_groups import single_errors

__all__ = [
    "COMPUTE_APPS_QUERY_ARGS",
    "DEFAULT_FILE_MODE",
    "NETWORK_FS_TYPES",
    "BeforeReplace",
    "CgroupOwner",
    "ComputeApp",
    "MountEntry",
    "cgroup_owner",
    "escape_mountinfo",
    "mount_at",
    "mount_holding",
    "parse_mountinfo",
    "read_compute_apps",
    "remove_stale_temp_files",
    "single_errors",
    "write_bytes_atomic",
    "write_json_atomic",
]
