"""Check placement by GPU against a real NVIDIA GPU (run on a GPU machine; it needs no network).

The test suite runs these paths with stand-ins only (a fake nvidia-smi, a Docker without the NVIDIA
runtime, no CUDA device); this script runs them on the real thing:

1. the agent's nvidia-smi probe lists the GPUs by UUID (what the model editor offers);
2. admission on that node's real memory admits a budget on a chosen GPU and refuses an unknown UUID;
3. a process given the environment the process driver gives llama-server for one chosen GPU
   (``CUDA_VISIBLE_DEVICES=<UUID>``) sees exactly that GPU through the CUDA driver API, and with no GPU
   chosen sees none.

One line per check; exit status 1 when any fails. Usage: ``.venv/bin/python tools/gpu_placement_check.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import anyio

from mirbad_protocol import GpuSelection
from mirbad_runtime import AdmissionRequest, MemoryProbe, NvidiaSmiProbe, check_admission, gpu_environment
from mirbad_runtime.exceptions import LaunchRejectedError

# Lists the UUIDs of the GPUs CUDA lets this process see, as nvidia-smi spells them.
_CUDA_PROBE = r"""
import ctypes
cuda = ctypes.CDLL("libcuda.so.1")
if cuda.cuInit(0) != 0:
    print("")  # CUDA_ERROR_NO_DEVICE: nothing visible
    raise SystemExit(0)
count = ctypes.c_int()
cuda.cuDeviceGetCount(ctypes.byref(count))
seen = []
for i in range(count.value):
    device = ctypes.c_int()
    cuda.cuDeviceGet(ctypes.byref(device), i)
    raw = (ctypes.c_ubyte * 16)()
    cuda.cuDeviceGetUuid(raw, device)
    h = bytes(raw).hex()
    seen.append(f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}")
print(",".join(seen))
"""


def _visible(selection: GpuSelection) -> str:
    """The GPUs a process given ``selection``'s environment sees, or why it could not tell."""
    env = {**os.environ, **gpu_environment(selection)}
    done = subprocess.run(
        [sys.executable, "-c", _CUDA_PROBE], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    if done.returncode != 0:
        return f"probe failed: {done.stderr.strip().splitlines()[-1:]}"
    return done.stdout.strip()


def _report(name: str, ok: bool, detail: str) -> bool:
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}")
    return ok


async def main() -> int:
    """Run the checks; 0 when all pass."""
    probe = NvidiaSmiProbe(timeout_s=10)
    gpus = await probe.query()
    results = [_report("nvidia-smi lists GPUs", bool(gpus), ", ".join(f"{g.index}={g.uuid}" for g in gpus))]
    if not gpus:
        return 1
    memory = await MemoryProbe(gpu_probe=probe.query).snapshot()
    chosen = GpuSelection(mode="uuids", uuids=[gpus[-1].uuid])
    check_admission(AdmissionRequest("check", 1.0, chosen), memory, [])
    results.append(_report("admission on the chosen GPU", True, f"1 GiB on {gpus[-1].uuid}"))
    try:
        check_admission(
            AdmissionRequest("check", 1.0, GpuSelection(mode="uuids", uuids=["GPU-ghost"])), memory, []
        )
        results.append(_report("admission refuses an unknown GPU", False, "admitted"))
    except LaunchRejectedError as exc:
        results.append(_report("admission refuses an unknown GPU", True, str(exc)))
    seen = _visible(chosen)
    results.append(_report("CUDA_VISIBLE_DEVICES=<UUID> shows that GPU only", seen == gpus[-1].uuid, seen))
    seen_none = _visible(GpuSelection(mode="none"))
    results.append(_report("no GPU chosen shows none", seen_none == "", seen_none or "(none)"))
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(anyio.run(main))
