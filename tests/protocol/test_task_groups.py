"""single_errors: a task group's exception group becomes the one error its caller documents."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, TypeAlias

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirbad_protocol import MirbadError
from mirbad_protocol.support import single_errors

# A tree of exception groups: a leaf names the kind of exception, a list is a group of its children.
Tree: TypeAlias = "str | list[Tree]"

_LEAF_KINDS = ("documented", "bug", "interrupt")


class DocumentedError(MirbadError):
    """An error a Mirbad function promises to raise."""


def build(tree: Tree, leaves: list[BaseException]) -> BaseException:
    """The exceptions ``tree`` describes; ``leaves`` collects the leaves in order."""
    if isinstance(tree, str):
        leaf: BaseException
        if tree == "documented":
            leaf = DocumentedError(f"documented {len(leaves)}")
        elif tree == "bug":
            leaf = ValueError(f"bug {len(leaves)}")
        else:
            leaf = KeyboardInterrupt()
        leaves.append(leaf)
        return leaf
    return BaseExceptionGroup("tasks failed", [build(child, leaves) for child in tree])


def raised_through_single_errors(exc: BaseException) -> BaseException:
    """What leaves a ``with single_errors():`` block whose body raises ``exc``."""
    try:
        with single_errors():
            raise exc
    except BaseException as caught:
        return caught
    raise AssertionError("single_errors swallowed the exception")


groups = st.recursive(
    st.sampled_from(_LEAF_KINDS),
    lambda children: st.lists(children, min_size=1, max_size=4),
    max_leaves=8,
).filter(lambda tree: isinstance(tree, list))


@given(groups)
def test_a_group_becomes_its_single_error_or_stays_itself(tree: Tree) -> None:
    leaves: list[BaseException] = []
    group = build(tree, leaves)

    raised = raised_through_single_errors(group)

    if len(leaves) == 1:
        assert raised is leaves[0]
    elif all(isinstance(leaf, MirbadError) for leaf in leaves):
        assert raised is leaves[0]
        assert raised.__notes__ == [
            f"also failed at the same time: DocumentedError: {other}" for other in leaves[1:]
        ]
    else:
        assert raised is group


@given(st.sampled_from(_LEAF_KINDS))
def test_an_exception_that_is_no_group_passes_unchanged(kind: str) -> None:
    exc = build(kind, [])

    assert raised_through_single_errors(exc) is exc


def test_the_error_keeps_its_own_cause_and_context() -> None:
    cause, context = OSError("socket gone"), KeyError("while reading")
    error = DocumentedError("docker did not answer")
    error.__cause__, error.__context__ = cause, context

    raised = raised_through_single_errors(ExceptionGroup("tasks", [ExceptionGroup("inner", [error])]))

    assert raised is error
    assert (raised.__cause__, raised.__context__) == (cause, context)


def test_a_block_that_succeeds_is_left_alone() -> None:
    with single_errors():
        value = 1

    assert value == 1


async def run_tasks(*tasks: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run ``tasks`` in one task group, wrapped the way Mirbad's functions wrap theirs."""
    with single_errors():
        async with anyio.create_task_group() as group:
            for task in tasks:
                group.start_soon(task)


def failing(exc: Exception) -> Callable[[], Coroutine[Any, Any, None]]:
    """A task that fails with ``exc`` in its first step, before any other task's failure cancels it."""

    async def fails() -> None:
        raise exc

    return fails


@pytest.mark.anyio
async def test_one_failing_task_reaches_the_caller_by_its_own_type() -> None:
    with pytest.raises(DocumentedError, match="docker did not answer"):
        await run_tasks(failing(DocumentedError("docker did not answer")), anyio.sleep_forever)


@pytest.mark.anyio
async def test_several_documented_errors_give_the_first_with_the_others_as_notes() -> None:
    with pytest.raises(DocumentedError) as raised:
        await run_tasks(failing(DocumentedError("a")), failing(DocumentedError("b")))

    (other,) = {"a", "b"} - {str(raised.value)}
    assert raised.value.__notes__ == [f"also failed at the same time: DocumentedError: {other}"]


@pytest.mark.anyio
async def test_a_bug_beside_a_documented_error_stays_a_group() -> None:
    with pytest.raises(ExceptionGroup) as raised:
        await run_tasks(failing(DocumentedError("documented")), failing(ValueError("bug")))

    kinds = sorted(type(exc).__name__ for exc in raised.value.exceptions)
    assert kinds == ["DocumentedError", "ValueError"]
