"""A stand-in agent: runs a ProcessDriver in its own process so a test can SIGKILL it.

Usage: ``python process_driver_child.py SETTINGS_JSON``. It starts the spec, prints ``READY <pid>``
once the model answers /health, then idles until it is killed (at most an hour).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio

from mirbad_protocol import ModelState, ProcessLaunch
from mirbad_runtime import (
    CatalogedExecutable,
    ExecutableCatalog,
    FileInstanceKeyProtector,
    PosixProcessHost,
    ProcessDriver,
    ProcessDriverConfig,
)

READY_WAIT_S = 60


def driver_from(settings: dict[str, Any]) -> ProcessDriver:
    """The driver the settings describe (the same construction the test process uses)."""
    config = ProcessDriverConfig(
        state_dir=Path(settings["state_dir"]),
        model_roots=(Path(settings["model_root"]),),
        port_range_start=settings["port_range_start"],
        port_range_end=settings["port_range_end"],
    )
    executable = CatalogedExecutable(
        name=settings["executable"]["name"],
        version=settings["executable"]["version"],
        path=Path(settings["executable"]["path"]),
        sha256=settings["executable"]["sha256"],
    )
    keys = FileInstanceKeyProtector(Path(settings["state_dir"]) / "keys")
    return ProcessDriver(config, host=PosixProcessHost(), catalog=ExecutableCatalog([executable]), keys=keys)


async def main(settings: dict[str, Any]) -> None:
    spec = ProcessLaunch.model_validate(settings["spec"])
    driver = driver_from(settings)
    await driver.start(spec)
    with anyio.fail_after(READY_WAIT_S):
        while (await driver.status(spec.model_id)).state is not ModelState.READY:  # noqa: ASYNC110
            await anyio.sleep(0.05)
    [record] = await driver.records.all()
    print(f"READY {record.pid}", flush=True)
    await anyio.sleep(3600)


if __name__ == "__main__":
    anyio.run(main, json.loads(sys.argv[1]))
