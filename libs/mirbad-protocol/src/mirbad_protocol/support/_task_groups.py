"""Turning a task group's exception group back into the one documented error its caller promises.

A task group wraps whatever its tasks raise in a :class:`BaseExceptionGroup`, even a single
exception; a function documented as raising ``RuntimeUnavailableError`` would otherwise hand its
callers a group that no ``except RuntimeUnavailableError`` (and no HTTP error mapping) catches.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from mirbad_protocol.exceptions import MirbadError

__all__ = ["single_errors"]


@contextmanager
def single_errors() -> Iterator[None]:
    """Re-raise a task group's error by itself, so callers catch it by its own type.

    Wrap the ``async with anyio.create_task_group()`` block. When it fails with an exception group:

    * a group holding one exception (nested groups included) raises that exception itself;
    * a group of several :class:`~mirbad_protocol.MirbadError` raises the first one, with a note
      (:meth:`BaseException.add_note`) for each of the others, so one documented error reaches the
      caller and the others still show in its traceback;
    * anything else (a bug beside a documented error, ``KeyboardInterrupt`` ...) stays the group, so
      an unexpected failure is never hidden behind an expected one.

    The exception raised keeps its own ``__cause__`` and ``__context__``, as its task raised it.

    Example::

        with single_errors():
            async with anyio.create_task_group() as group:
                group.start_soon(read_one)
                group.start_soon(read_other)
    """
    try:
        yield
    except BaseExceptionGroup as group:
        chosen = _single_error(group)
        if chosen is None:
            raise
        context = chosen.__context__
        try:
            raise chosen
        finally:
            # Raising here makes the group its context; the error keeps the one its task gave it.
            chosen.__context__ = context


def _single_error(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    leaves = _leaves(group)
    if len(leaves) == 1:
        return leaves[0]
    if not all(isinstance(leaf, MirbadError) for leaf in leaves):
        return None
    first, *others = leaves
    for other in others:
        first.add_note(f"also failed at the same time: {type(other).__name__}: {other}")
    return first


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    found: list[BaseException] = []
    for exc in group.exceptions:
        found.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return found
