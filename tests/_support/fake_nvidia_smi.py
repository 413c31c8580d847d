#!/usr/bin/env python3
"""A stand-in ``nvidia-smi`` (stdlib only) for ``--query-compute-apps=pid,process_name,used_memory``
and the agent's GPU query (``--query-gpu=index,uuid,name,memory.total,memory.used,utilization.gpu``).

It prints what the real tool prints with ``--format=csv,noheader,nounits``: one ``pid, name, MiB`` row
per compute process, comma and space separated (nvidia-smi's ``--help-query-compute-apps``), or one
``index, uuid, name, total MiB, used MiB, percent`` row per GPU. The fixture
(``MIRBAD_FAKE_NVIDIA_SMI_STATE``) is ``{"apps": [{"pid", "name", "used"}], "gpus": [{"index", "uuid",
"name", "total", "used", "utilization"}], "exit": 0, "message": "..."}`` (a GPU's ``utilization`` may be
``"[N/A]"``, as the real tool prints it where the driver has none); a non-zero ``exit`` prints
``message`` on stdout, as nvidia-smi reports its own failures. Each call's argv is appended as a JSON
line to ``MIRBAD_FAKE_NVIDIA_SMI_LOG``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

GPU_QUERY = "--query-gpu=index,uuid,name,memory.total,memory.used,utilization.gpu"


def main(argv: list[str]) -> int:
    log = os.environ.get("MIRBAD_FAKE_NVIDIA_SMI_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(argv) + "\n")
    state = json.loads(Path(os.environ["MIRBAD_FAKE_NVIDIA_SMI_STATE"]).read_text(encoding="utf-8"))
    if state.get("exit", 0):
        print(
            state.get(
                "message", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
            )
        )
        return int(state["exit"])
    if GPU_QUERY in argv:
        for gpu in state.get("gpus", []):
            columns = ("index", "uuid", "name", "total", "used", "utilization")
            print(", ".join(str(gpu[column]) for column in columns))
        return 0
    if "--query-compute-apps=pid,process_name,used_memory" not in argv:
        print("unsupported query for this stand-in", file=sys.stderr)
        return 2
    for app in state.get("apps", []):
        print(f"{app['pid']}, {app['name']}, {app['used']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
