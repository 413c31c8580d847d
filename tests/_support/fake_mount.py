#!/usr/bin/env python3
"""A stand-in ``mount`` and ``umount`` (stdlib only): the kernels here have neither cifs nor nfs.

One script, two commands: ``fake_umount.py`` beside it runs :func:`main` as ``umount``. Every call's
argv is one JSON line in ``MIRBAD_FAKE_MOUNT_LOG``. The fixture ``MIRBAD_FAKE_MOUNT_STATE`` is
``{"mount": {"exit": 0, "stderr": "", "owner": [uid, gid], "mode": "0770", "readonly": false},
"umount": {"busy": false}}``.

A mount that succeeds makes the real mount-point folder look as the mounted share's root would to
the client: a cifs mount's ``uid=``, ``gid=`` and ``dir_mode=`` options (what mount.cifs presents),
or for nfs the fixture's ``owner`` and ``mode`` (the export's own); ``readonly`` makes it 0555, as a
share the account may not write. The probe's write as the backup account then succeeds or fails for
real on that folder. The mount is also added to the mount table ``MIRBAD_FAKE_MOUNTINFO`` and taken
out by umount. A busy umount fails unless lazy (``-l``), as umount(8) does.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

_MOUNT_ID = 800


def main(program: str, argv: list[str]) -> int:
    log = os.environ.get("MIRBAD_FAKE_MOUNT_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(json.dumps([program, *argv]) + "\n")
    state_path = os.environ.get("MIRBAD_FAKE_MOUNT_STATE")
    state: dict[str, Any] = {}
    if state_path and Path(state_path).exists():
        state = json.loads(Path(state_path).read_text(encoding="utf-8"))
    if program == "umount":
        return _umount(state.get("umount", {}), argv)
    return _mount(state.get("mount", {}), argv)


def _mount(fixture: dict[str, Any], argv: list[str]) -> int:
    if fixture.get("exit", 0) != 0:
        print(fixture.get("stderr", "mount error"), file=sys.stderr)
        return int(fixture["exit"])
    kind = argv[argv.index("-t") + 1]
    options = dict(item.partition("=")[::2] for item in argv[argv.index("-o") + 1].split(","))
    source, folder = argv[argv.index("--") + 1 :]
    if kind == "cifs":
        uid, gid, mode = int(options["uid"]), int(options["gid"]), int(options["dir_mode"], 8)
    else:
        uid, gid = fixture.get("owner", [0, 0])
        mode = int(fixture.get("mode", "0755"), 8)
    if fixture.get("readonly"):
        mode = 0o555
    os.chown(folder, uid, gid)
    os.chmod(folder, mode)
    _table(folder, f"{kind} {source}", mounted=True)
    return 0


def _umount(fixture: dict[str, Any], argv: list[str]) -> int:
    folder = argv[argv.index("--") + 1]
    if fixture.get("busy") and "-l" not in argv:
        print(f"umount: {folder}: target is busy.", file=sys.stderr)
        return 32
    _table(folder, "", mounted=False)
    return 0


def _table(folder: str, what: str, *, mounted: bool) -> None:
    table = Path(os.environ["MIRBAD_FAKE_MOUNTINFO"])
    lines = table.read_text(encoding="utf-8").splitlines() if table.exists() else []
    lines = [line for line in lines if line.split(" ")[4:5] != [folder]]
    if mounted:
        lines.append(f"{_MOUNT_ID} 1 0:98 / {folder} rw,relatime - {what} rw")
    table.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main("mount", sys.argv[1:]))
