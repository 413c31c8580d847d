"""``python -m bench.router [--quick] [--out PATH]``: run the router benchmark and write its report.

The load generator is ``wrk`` when it is on PATH (else Python, with the reason printed); LiteLLM's
proxy is measured beside ours unless ``--no-litellm`` (a ``--quick`` run leaves it out unless
``--litellm``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from ._harness import DEFAULT_REPORT, BenchOptions, run_benchmark
from ._report import render_markdown, render_summary


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark, print the summary, write the report; the exit status is 0 once written."""
    parser = argparse.ArgumentParser(prog="python -m bench.router", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny windows: checks the harness, not speed")
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_REPORT, help=f"the report (default {DEFAULT_REPORT})"
    )
    parser.add_argument("--duration", type=float, help="seconds measured per point (default 3)")
    parser.add_argument("--work-dir", type=Path, help="keep the data directory and logs here")
    parser.add_argument("--no-litellm", action="store_true", help="leave out the LiteLLM rows")
    parser.add_argument(
        "--litellm", action="store_true", help="measure LiteLLM even in a --quick run (installs it once)"
    )
    parser.add_argument(
        "--python-load", action="store_true", help="use the Python load generator even when wrk is on PATH"
    )
    arguments = parser.parse_args(argv)
    options = BenchOptions.quick_run() if arguments.quick else BenchOptions()
    if arguments.duration is not None:
        options = replace(options, duration_s=arguments.duration)
    if arguments.no_litellm or arguments.litellm:
        options = replace(options, litellm=arguments.litellm and not arguments.no_litellm)
    if arguments.python_load:
        options = replace(options, python_load=True)
    if arguments.work_dir is not None:
        options = replace(options, work_dir=arguments.work_dir.absolute())
    results = run_benchmark(options)
    command = "python -m bench.router" + (" --quick" if arguments.quick else "")
    arguments.out.parent.mkdir(parents=True, exist_ok=True)
    arguments.out.write_text(render_markdown(results, command))
    print(render_summary(results))
    print(f"\nreport written to {arguments.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
