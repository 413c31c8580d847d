#!/usr/bin/env python3
"""A stand-in ``systemctl`` (stdlib only) that replays systemd 252's output formats from a JSON fixture.

Where the formats come from: systemd's ``src/systemctl/systemctl-list-units.c`` and
``systemctl-list-unit-files.c`` build their tables with the columns ``unit, load, active, sub, job,
description`` and ``unit file, state, preset``; ``-o json`` prints each table as one JSON array of
objects keyed by the lowercased column header, spaces as ``_`` (``unit_file``), an empty job column
hidden. ``systemctl show`` prints ``Key=Value`` lines per unit, a blank line between units; with
``--timestamp=unix`` a timestamp reads ``@<seconds>``, an unset one is empty, and an unset
``MemoryCurrent`` reads ``[not set]`` (``man systemctl``, systemd 252). Service properties come
before the unit ones, as the real tool lists the Service interface first.

The fixture (``MIRBAD_FAKE_SYSTEMCTL_STATE``) is ``{"managers": {"system": [unit, ...],
"user:alice": [...]}, "failing": ["user:bob"], "failing_actions": ["x.service"], "hanging":
["start"]}`` where a unit is ``{"unit", "load", "active", "sub", "description", "file_state",
"preset", "fragment", "memory", "cgroup", "active_enter", "listed", "alias_of"}``; actions change it
the way systemd would, so a later ``show`` sees the new state. Every call's argv is appended as one
JSON line to
``MIRBAD_FAKE_SYSTEMCTL_LOG``.

Mount units (hostd's backup share): ``daemon-reload`` loads every ``*.mount`` file of
``MIRBAD_FAKE_UNIT_DIR`` (its ``What=``, ``Where=``, ``Type=``) and unloads one whose file is gone;
starting one appends its line to the mount table ``MIRBAD_FAKE_MOUNTINFO`` (proc(5)'s format), stopping
it (``stop``, ``disable --now``) takes the line out, unless the unit is in the fixture's ``busy`` list:
then the stop fails as systemd's does when umount finds the target busy. ``failing_actions`` may also
name ``verb:unit`` to fail one verb only. ``reset-failed`` succeeds.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

_ACTIONS = {"start", "stop", "restart", "enable", "disable"}
_MOUNT_ID = 900


def main(argv: list[str]) -> int:
    log = os.environ.get("MIRBAD_FAKE_SYSTEMCTL_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(argv) + "\n")
    state_path = Path(os.environ["MIRBAD_FAKE_SYSTEMCTL_STATE"])
    state = json.loads(state_path.read_text(encoding="utf-8"))
    manager, rest = _manager(argv)
    if manager in state.get("failing", []):
        print("Failed to connect to bus: No medium found", file=sys.stderr)
        return 1
    units = state["managers"].setdefault(manager, [])
    positional = _positional(rest)
    command = positional[0] if positional else "list-units"
    if command == "list-units":
        rows = [_unit_row(u) for u in units if u.get("listed", True) and u["unit"].endswith(".service")]
        print(json.dumps(rows, separators=(",", ":")))
        return 0
    if command == "list-unit-files":
        rows = [_file_row(u) for u in units if u.get("file_state")]
        print(json.dumps(rows, separators=(",", ":")))
        return 0
    if command == "show":
        print("\n\n".join(_show(units, name, _properties(rest)) for name in positional[1:]))
        return 0
    if command == "daemon-reload":
        _reload_mount_units(units)
        state_path.write_text(json.dumps(state, indent=2), encoding="utf-8")
        return 0
    if command == "reset-failed":
        return 0
    if command in state.get("hanging", []):
        time.sleep(3600)  # a wedged manager: hostd's bound has to end the call
    if command in _ACTIONS:
        code = _act(state, units, command, positional[1:], now="--now" in rest)
        state_path.write_text(json.dumps(state, indent=2), encoding="utf-8")
        return code
    print(f"Unknown command verb {command}.", file=sys.stderr)
    return 1


def _manager(argv: list[str]) -> tuple[str, list[str]]:
    user = next(
        (a.removeprefix("--machine=").removesuffix("@") for a in argv if a.startswith("--machine=")), None
    )
    manager = f"user:{user}" if "--user" in argv and user else "system"
    rest = [a for a in argv if a not in {"--user", "--system"} and not a.startswith("--machine=")]
    return manager, rest


def _positional(args: list[str]) -> list[str]:
    found: list[str] = []
    skip = False
    for index, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg == "--":
            return found + args[index + 1 :]
        if arg in {"-p", "-o", "--property", "--output"}:
            skip = True
        elif not arg.startswith("-"):
            found.append(arg)
    return found


def _properties(args: list[str]) -> list[str]:
    wanted: list[str] = []
    for index, arg in enumerate(args):
        if arg in {"-p", "--property"} and index + 1 < len(args):
            wanted.extend(args[index + 1].split(","))
        elif arg.startswith("--property="):
            wanted.extend(arg.removeprefix("--property=").split(","))
    return wanted


def _unit_row(unit: dict[str, Any]) -> dict[str, Any]:
    return {k: unit.get(k, "") for k in ("unit", "load", "active", "sub", "description")}


def _file_row(unit: dict[str, Any]) -> dict[str, Any]:
    return {"unit_file": unit["unit"], "state": unit["file_state"], "preset": unit.get("preset")}


def _find(units: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    return next((u for u in units if u["unit"] == name), None)


def _show(units: list[dict[str, Any]], name: str, wanted: list[str]) -> str:
    unit = _find(units, name)
    if unit is not None and unit.get("alias_of"):
        unit = _find(units, unit["alias_of"]) or unit
    if unit is None or (not unit.get("listed", True) and not unit.get("file_state")):
        values = {
            "Id": name,
            "Description": name,
            "LoadState": "not-found",
            "ActiveState": "inactive",
            "SubState": "dead",
            "FragmentPath": "",
            "UnitFileState": "",
            "ActiveEnterTimestamp": "",
            "ControlGroup": "",
            "MemoryCurrent": "[not set]",
        }
    else:
        memory = unit.get("memory")
        entered = unit.get("active_enter")
        values = {
            "MemoryCurrent": "[not set]" if memory is None else str(memory),
            "ControlGroup": unit.get("cgroup", "") if unit.get("active") == "active" else "",
            "Id": unit["unit"],
            "Description": unit.get("description", ""),
            "LoadState": unit.get("load", "loaded"),
            "ActiveState": unit.get("active", "inactive"),
            "SubState": unit.get("sub", "dead"),
            "FragmentPath": unit.get("fragment", ""),
            "UnitFileState": unit.get("file_state") or "",
            "ActiveEnterTimestamp": "" if entered is None else f"@{entered}",
        }
    return "\n".join(f"{key}={value}" for key, value in values.items() if not wanted or key in wanted)


def _act(
    state: dict[str, Any], units: list[dict[str, Any]], command: str, names: list[str], *, now: bool = False
) -> int:
    for name in names:
        unit = _find(units, name)
        failing = state.get("failing_actions", [])
        if unit is None or name in failing or f"{command}:{name}" in failing:
            verb = {"start": "start", "stop": "stop", "restart": "restart"}.get(command, command)
            print(f"Failed to {verb} {name}: Unit {name} not found.", file=sys.stderr)
            return 5 if unit is None else 1
        stopping = command == "stop" or (command == "disable" and now)
        if "mount" in unit and stopping and name in state.get("busy", []):
            print(f"Job for {name} failed. See 'journalctl -xeu {name}' for details.", file=sys.stderr)
            return 1
        if "mount" in unit and command in {"start", "restart"}:
            _mount_table(unit["mount"], mounted=True)
        elif "mount" in unit and stopping:
            _mount_table(unit["mount"], mounted=False)
        if command in {"start", "restart"}:
            unit.update(active="active", sub="running", active_enter=1764590000)
        elif stopping:
            unit.update(active="inactive", sub="dead")
        if command == "enable":
            unit["file_state"] = "enabled"
        elif command == "disable":
            unit["file_state"] = "disabled"
    return 0


def _reload_mount_units(units: list[dict[str, Any]]) -> None:
    folder = os.environ.get("MIRBAD_FAKE_UNIT_DIR")
    if not folder:
        return
    files = {path.name: path for path in Path(folder).glob("*.mount")}
    units[:] = [u for u in units if "mount" not in u or u["unit"] in files]
    for name, path in files.items():
        keys = dict(
            line.split("=", 1) for line in path.read_text(encoding="utf-8").splitlines() if "=" in line
        )
        mount = {"what": keys.get("What", ""), "where": keys.get("Where", ""), "type": keys.get("Type", "")}
        unit = _find(units, name)
        if unit is None:
            unit = {"unit": name, "active": "inactive", "sub": "dead", "file_state": "disabled"}
            units.append(unit)
        unit.update(load="loaded", fragment=str(path), mount=mount, description="Mirbad backup share")


def _mount_table(mount: dict[str, str], *, mounted: bool) -> None:
    table = Path(os.environ["MIRBAD_FAKE_MOUNTINFO"])
    lines = table.read_text(encoding="utf-8").splitlines() if table.exists() else []
    where = mount["where"].replace("\\", "\\134").replace(" ", "\\040")
    lines = [line for line in lines if line.split(" ")[4:5] != [where]]
    if mounted:
        lines.append(
            f"{_MOUNT_ID} 1 0:99 / {where} rw,relatime shared:1 - {mount['type']} {mount['what']} rw"
        )
    table.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
