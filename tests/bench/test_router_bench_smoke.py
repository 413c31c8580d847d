"""The router benchmark runs end to end in ``--quick`` mode and writes a well-formed report.

Only the shape is checked (sections, a row per path and concurrency, every target): the numbers of a
quick run on a shared machine mean nothing, and a test never asserts a timing. A quick run leaves
LiteLLM out (installing it takes minutes), so its rows are not expected here.
"""

from __future__ import annotations

import json
import shutil
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
    "Streamed events per second",
    "Server-sent events: from the upstream's write to the client's read",
    "Resident memory (VmRSS)",
    "CPU per request",
    "Targets",
    "What limits it",
    "What was tried on the hot path, and what it gave",
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
    assert len(tables) == 6
    for table in tables:
        header, separator, *rows = table
        assert rows
        assert all(set(cell) <= set("-:") for cell in separator)
        assert all(len(row) == len(header) for row in [separator, *rows])
    throughput, streamed, sse, memory, cpu, targets = tables
    assert [(row[0], row[1]) for row in throughput[2:]] == [(p, c) for c in ("1", "64") for p in PATHS]
    assert [row[0] for row in streamed[2:]] == PATHS
    assert [row[0] for row in sse[2:]] == PATHS
    assert [row[0] for row in memory[2:]] == ["master", "agent", "upstream"]
    assert all(row[1].endswith(" MB") for row in memory[2:])
    assert [(row[0], row[1]) for row in cpu[2:]] == [(p, c) for c in ("1", "64") for p in PATHS]
    assert len(targets[2:]) == 9
    assert all(row[2] in {"yes", "**no**", "n/a"} for row in targets[2:])
    # wrk is the load generator wherever it is installed (CI installs it); else the report says why not.
    if shutil.which("wrk"):
        assert "Debian's `wrk`" in text
    else:
        assert "not on PATH" in text

    # Ctrl-C stopped the stack: the agent stopped its model before it went.
    records = json.loads((work_dir / "data" / "agent" / "processes.json").read_text())
    assert records["processes"] == []
