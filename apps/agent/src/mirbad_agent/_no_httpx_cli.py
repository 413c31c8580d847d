"""Keeps httpx from importing its command line into the agent, which never runs it.

httpx's ``__init__`` imports ``httpx._main`` (rich, pygments, click) whenever those are installed, as
they are beside the master, and falls back to a stub ``main`` that explains how to install them when
that import fails. A ``None`` in :data:`sys.modules` makes an import fail (the import system's
documented sentinel), so httpx takes its fallback: 1.2 MB less in the idle agent. Imported first by
the package, before anything imports httpx; where httpx was imported already it changes nothing.
"""

from __future__ import annotations

import sys

__all__: list[str] = []

sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]  # None is the sentinel
