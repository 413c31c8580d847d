"""The router benchmark runs end to end in ``--quick`` mode and writes a well-formed report.

Only the shape is checked (sections, a row per path and concurrency, the four targets): the numbers
of a quick run on a shared machine mean nothing, and a test never asserts a timing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the harness reads /proc"),
    pytest.mark.timeout(300),
]

ROOT = Path(__file__).resolve().parents[2]
PATHS = ["direct", "agent", "master+agent"]
SECTIONS = [
    "How it was measured",
    "Requests per second and latency",
    "Server-sent events: from the upstream's write to the client's read",
    "Resident memory (VmRSS)",
    "CPU per request",
    "Targets",
    "What limits it",
]


def _tables(text: str) -> list[list[list[str]]]:
    """Every Markdown table of ``text`` as rows of cells (the separator row dropped)."""
    tables: list[list[list[str]]] = []
    current: list[list[str]] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            current.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif current:
            tables.append(current)
            current = []
    return tables


def test_a_quick_run_writes_a_well_formed_report(tmp_path: Path) -> None:
    report = tmp_path / "performance.md"
    work_dir = tmp_path / "work"
    result = subprocess.run(
        [sys.executable, "-m", "bench.router", "--quick", "--out", str(report), "--work-dir", str(work_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"report written to {report}" in result.stdout

    text = report.read_text()
    assert text.startswith("# Router performance\n")
    assert [line[3:] for line in text.splitlines() if line.startswith("## ")] == SECTIONS
    tables = _tables(text)
    assert len(tables) == 5
    for table in tables:
        header, separator, *rows = table
        assert rows
        assert all(set(cell) <= set("-:") for cell in separator)
        assert all(len(row) == len(header) for row in [separator, *rows])
    throughput, sse, memory, cpu, targets = tables
    assert [(row[0], row[1]) for row in throughput[2:]] == [(p, c) for c in ("1", "16", "64") for p in PATHS]
    assert [row[0] for row in sse[2:]] == PATHS
    assert [row[0] for row in memory[2:]] == ["master", "agent", "upstream"]
    assert all(row[1].endswith(" MB") for row in memory[2:])
    assert [(row[0], row[1]) for row in cpu[2:]] == [(p, c) for c in ("1", "16", "64") for p in PATHS]
    assert len(targets[2:]) == 4
    assert all(row[2] in {"yes", "**no**"} for row in targets[2:])

    # Ctrl-C stopped the stack: the agent stopped its model before it went.
    records = json.loads((work_dir / "data" / "agent" / "processes.json").read_text())
    assert records["processes"] == []
