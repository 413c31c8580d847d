"""What was tried on the router's hot path and what the bench showed: the report's last section.

Written by hand from the runs it describes (the numbers are from those runs, not from the run above
them in the report), so that the report keeps the record of what paid and what did not.
"""

from __future__ import annotations

from typing import Final

__all__ = ["TRIED"]

TRIED: Final = "(filled in from the measurements)"
"""Markdown: one bullet per attempt."""
