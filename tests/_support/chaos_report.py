"""The chaos suite's one line of figures, printed at the end of the run that ran it.

Each chaos scenario leaves its figures on its report (``user_properties``, key ``chaos``), which xdist
carries from a worker to the controller; here they are summed and printed as one line that starts
with ``chaos:``, so a CI log shows them whichever worker ran the suite.
"""

from __future__ import annotations

from typing import Any, Final, cast

import pytest

CHAOS_PROPERTY: Final = "chaos"
"""The ``user_properties`` key of a scenario's figures (a mapping of the names below)."""
_SUMMED: Final = ("scenarios", "kills", "acknowledged_writes", "lost_writes", "duplicates", "hung_streams")
_WORST: Final = "worst_recovery_s"
_RUN: dict[str, float] = {}
"""The figures of this process's run (the controller's, under xdist)."""


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add a scenario's figures (its call phase) to the run's."""
    if report.when != "call":
        return
    for key, value in report.user_properties:
        if key != CHAOS_PROPERTY:
            continue
        add_figures(_RUN, cast("dict[str, Any]", value))


def add_figures(run: dict[str, float], scenario: dict[str, Any]) -> None:
    """Add one scenario's figures to ``run``: the counts summed, the worst recovery the largest."""
    for name in _SUMMED:
        run[name] = run.get(name, 0) + int(scenario.get(name, 0))
    run[_WORST] = max(run.get(_WORST, 0.0), float(scenario.get(_WORST, 0.0)))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Print the ``chaos:`` line when a scenario ran."""
    if _RUN:
        terminalreporter.write_line(format_figures(_RUN))


def format_figures(figures: dict[str, float]) -> str:
    """The one line: every count, then the worst recovery in seconds."""
    counts = " ".join(f"{name}={int(figures.get(name, 0))}" for name in _SUMMED)
    return f"chaos: {counts} {_WORST}={figures.get(_WORST, 0.0):.1f}"
