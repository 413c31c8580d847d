"""Running the master and the agent on uvloop when it is installed, through anyio's backend options.

uvloop's event loop costs less per socket operation than asyncio's own, and a proxy hop is almost
nothing but socket operations. It is an optional speed-up, never a requirement: where it is not
importable (Windows, PyPy, an install without it) the asyncio loop runs, silently.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, TypeVarTuple

import anyio

__all__ = ["fast_backend_options", "run_event_loop"]

_T = TypeVar("_T")
_Args = TypeVarTuple("_Args")


def fast_backend_options() -> dict[str, Any]:
    """The asyncio backend options for anyio: ``use_uvloop`` when uvloop is importable, else none."""
    try:
        import uvloop  # noqa: F401 (only whether it imports matters)
    except ImportError:
        return {}
    return {"use_uvloop": True}


def run_event_loop(func: Callable[[*_Args], Awaitable[_T]], *args: *_Args) -> _T:
    """``anyio.run(func, *args)`` on uvloop when it is importable, else on asyncio's own loop."""
    return anyio.run(func, *args, backend_options=fast_backend_options())
