"""An idle master does not load what only a benchmark run needs (its idle memory is a target of issue 16).

jsonschema checks a model's tool-call arguments during a benchmark; it is imported there. Checked in a
fresh interpreter, since this test process has imported everything already.
"""

from __future__ import annotations

import json
import subprocess
import sys

LAZY = ["jsonschema", "docker", "huggingface_hub"]


def test_the_masters_entry_point_loads_no_benchmark_or_container_libraries() -> None:
    probe = (
        "import json, sys\n"
        "import mirbad_master.cli, mirbad_master._app\n"
        f"print(json.dumps([name for name in {LAZY!r} if name in sys.modules]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(result.stdout) == []
