"""The portal's progress of a job, whatever its kind: a bar and a status line, live while the page is open.

The Benchmark and Tuning views (and later kinds) draw their job with :class:`JobProgress`; a kind only
says how far its running job is (a fraction) and words its status. Only a succeeded job is full; a
failed or cancelled one is drawn empty in the colour of its ending, so a failure never reads as a
completed run.
"""

from __future__ import annotations

from nicegui import ui

from mirbad_orchestration.jobs import JobView

from ._marks import testid

__all__ = ["JobProgress", "progress_fill"]


def progress_fill(job: JobView | None, fraction: float | None) -> tuple[float, str]:
    """The bar's fill and Quasar colour for ``job``, ``fraction`` of it done while it runs."""
    if job is None:
        return 0.0, "primary"
    if job.state == "running":
        return (min(0.95, fraction) if fraction is not None else 0.0), "primary"
    if job.state == "succeeded":
        return 1.0, "positive"
    return 0.0, "negative" if job.state == "failed" else "grey-7"


class JobProgress:
    """A job's bar and status line, built where it is created.

    Args:
        name: the test id's prefix (``benchmark``: ``benchmark-progress``, ``benchmark-status``).
    """

    def __init__(self, name: str) -> None:
        self._bar = testid(
            ui.linear_progress(value=0, show_value=False).props("instant-feedback").classes("w-full"),
            f"{name}-progress",
        )
        self._status = testid(ui.label("").classes("text-caption text-grey-8"), f"{name}-status")

    def show(self, job: JobView | None, *, status: str = "", fraction: float | None = None) -> None:
        """Draw ``job`` (None: no job yet) with its ``status`` words and, while it runs, its ``fraction``."""
        self._status.set_text(status if job is not None else "")
        fill, color = progress_fill(job, fraction)
        self._bar.set_value(fill)
        self._bar.props(f"color={color}")
