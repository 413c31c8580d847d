"""hostd's settings: a JSON file (``--config``), overridden by command-line flags.

Every path is a setting, so the tests run a real hostd with all its files under a temporary folder.
Keys are snake_case and unknown keys are refused: a misspelt setting fails the start.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .exceptions import HostdStartupError

__all__ = ["HostdSettings", "load_settings"]

_Positive = Annotated[float, Field(gt=0)]


class HostdSettings(BaseModel):
    """Everything hostd reads at start-up.

    Attributes:
        socket_path: the unix socket (its folder is made root:``socket_group`` 0750, the socket 0660).
        socket_group: the group that may reach the socket (``docker``: it holds root-equivalent
            power already, so hostd widens nothing).
        state_dir: the folder of ``whitelist.json`` (0700).
        config_file: the seed (``hostd.json``): services, ``discoverUsers``.
        deny_file: extra deny patterns (``{"patterns": [...]}``); may be absent.
        systemctl: the systemctl executable (a stand-in in tests).
        nvidia_smi: the nvidia-smi executable.
        proc_root: where ``<pid>/cgroup`` files are read (``/proc``).
        query_timeout_s: the bound of one listing or ``show`` call.
        action_timeout_s: the bound of one action.
        gpu_timeout_s: the bound of one nvidia-smi call.
        show_batch: units per ``systemctl show`` call.
        require_root_owner: refuse trusted files that root does not own (off only where tests cannot
            run as root).
        backup_target: the fixed folder the backup share is mounted at (the host folder the master's
            ``/backups`` is bound from, ``MIRBAD_BACKUPS_DIR``); requests never name it.
        unit_dir: where the share's mount unit is written (``/etc/systemd/system``).
        mount: the mount executable (a stand-in in tests).
        umount: the umount executable (a stand-in in tests).
        probe_root: where a share is mounted for its test (hostd's private ``/tmp``).
        backup_uid: the account the master writes backups as (the image's ``mirbad`` user); the
            probe writes as it, a cifs share presents its files as it.
        backup_gid: that account's group.
        mount_timeout_s: the bound of one probe mount, unmount or probe write.
        mount_status_timeout_s: the bound of reading the share's free space.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    socket_path: Path = Path("/run/mirbad-hostd/hostd.sock")
    socket_group: str = "docker"
    state_dir: Path = Path("/var/lib/mirbad-hostd")
    config_file: Path = Path("/etc/mirbad/hostd.json")
    deny_file: Path = Path("/etc/mirbad/hostd-deny.json")
    systemctl: str = "systemctl"
    nvidia_smi: str = "nvidia-smi"
    proc_root: Path = Path("/proc")
    query_timeout_s: _Positive = 15.0
    action_timeout_s: _Positive = 60.0
    gpu_timeout_s: _Positive = 5.0
    show_batch: Annotated[int, Field(ge=1, le=500)] = 50
    require_root_owner: bool = True
    backup_target: Path = Path("/srv/mirbad/backups")
    unit_dir: Path = Path("/etc/systemd/system")
    mount: str = "mount"
    umount: str = "umount"
    probe_root: Path = Path("/tmp")  # noqa: S108 - PrivateTmp=: hostd's own /tmp, no other account's
    backup_uid: Annotated[int, Field(ge=1)] = 10001
    backup_gid: Annotated[int, Field(ge=1)] = 10001
    mount_timeout_s: _Positive = 30.0
    mount_status_timeout_s: _Positive = 3.0

    @field_validator("backup_target")
    @classmethod
    def _absolute_target(cls, value: Path) -> Path:
        if not value.is_absolute() or value == Path("/"):
            raise ValueError("must be an absolute folder below /")
        return value

    @property
    def whitelist_file(self) -> Path:
        """The whitelist: ``{state_dir}/whitelist.json``."""
        return self.state_dir / "whitelist.json"

    @property
    def backup_state_file(self) -> Path:
        """The backup share without its password: ``{state_dir}/backup-mount.json``."""
        return self.state_dir / "backup-mount.json"

    @property
    def backup_credentials_file(self) -> Path:
        """The cifs credentials (root, 0600): ``{state_dir}/backup-share.credentials``."""
        return self.state_dir / "backup-share.credentials"

    @property
    def mountinfo_file(self) -> Path:
        """Hostd's own mount table: ``{proc_root}/self/mountinfo``."""
        return self.proc_root / "self" / "mountinfo"


def load_settings(path: Path | None, overrides: Mapping[str, Any]) -> HostdSettings:
    """Read the settings file (when given) and apply ``overrides`` on top.

    Raises:
        HostdStartupError: the file cannot be read or a setting is invalid (named).
    """
    values: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise HostdStartupError(f"{path}: cannot read the settings: {exc}") from None
        if not isinstance(loaded, dict):
            raise HostdStartupError(f"{path}: the settings must be a JSON object")
        values.update(loaded)
    values.update(overrides)
    try:
        return HostdSettings.model_validate(values)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"])
        raise HostdStartupError(f"setting {where}: {first['msg']}") from None
