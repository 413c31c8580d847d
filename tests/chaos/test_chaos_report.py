"""The chaos suite's figures line: the scenarios' counts summed, the worst recovery kept."""

from __future__ import annotations

from tests._support.chaos_report import add_figures, format_figures


def test_the_line_sums_counts_and_keeps_the_worst_recovery() -> None:
    run: dict[str, float] = {}
    add_figures(run, {"scenarios": 1, "kills": 3, "acknowledged_writes": 0, "worst_recovery_s": 12.34})
    add_figures(
        run, {"scenarios": 1, "kills": 1, "acknowledged_writes": 9, "lost_writes": 0, "worst_recovery_s": 4.0}
    )

    assert format_figures(run) == (
        "chaos: scenarios=2 kills=4 acknowledged_writes=9 lost_writes=0 duplicates=0 hung_streams=0"
        " worst_recovery_s=12.3"
    )


def test_a_lost_write_or_a_hung_stream_shows_in_the_line() -> None:
    run: dict[str, float] = {}
    add_figures(run, {"scenarios": 1, "lost_writes": 1, "hung_streams": 2, "duplicates": 1})

    line = format_figures(run)

    assert "lost_writes=1" in line
    assert "duplicates=1" in line
    assert "hung_streams=2" in line
