"""mirbad_orchestration's exceptions module draws its real exception tree, with a name per class."""

from __future__ import annotations

import sys
from types import ModuleType

import pytest
from tests._support.exception_tree import DrawnClass, check_exception_tree, parse_exception_tree

from mirbad_orchestration import exceptions


def test_the_drawn_tree_is_the_real_one_with_unique_names() -> None:
    check_exception_tree(exceptions, "mirbad_orchestration")


# ---------------------------------------------------------------- the check itself catches a wrong drawing


class _RootError(Exception):
    pass


class _ChildError(_RootError):
    pass


class _GrandchildError(_ChildError, KeyError):
    pass


def _module(doc: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    module = ModuleType("tree_check_sample")
    module.__doc__ = doc
    monkeypatch.setitem(sys.modules, module.__name__, module)
    for cls in (_RootError, _ChildError, _GrandchildError):
        cls.__module__ = module.__name__
        setattr(module, cls.__name__, cls)
    return module


TRUE_TREE = """Sample.

Tree::

    _RootError(Exception)
    └── _ChildError
        └── _GrandchildError(_ChildError, KeyError)
"""


def test_a_true_drawing_parses_to_the_lines_drawn(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_exception_tree(TRUE_TREE) == [
        DrawnClass("_RootError", None, ("Exception",)),
        DrawnClass("_ChildError", "_RootError", None),
        DrawnClass("_GrandchildError", "_ChildError", ("_ChildError", "KeyError")),
    ]
    check_exception_tree(_module(TRUE_TREE, monkeypatch), "tree_check_sample")


@pytest.mark.parametrize(
    "wrong",
    [
        TRUE_TREE.replace("    └── _ChildError\n        └── _Grand", "    ├── _ChildError\n    └── _Grand"),
        TRUE_TREE.replace("(_ChildError, KeyError)", ""),
        TRUE_TREE.replace("        └── _GrandchildError(_ChildError, KeyError)\n", ""),
        TRUE_TREE + "    └── _GrandchildError(_ChildError, KeyError)\n",
        TRUE_TREE.replace("Tree::", "Tree:"),
    ],
    ids=["wrong parent", "bases left out", "class left out", "class drawn twice", "no tree"],
)
def test_a_wrong_drawing_fails(wrong: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises((AssertionError, ValueError)):
        check_exception_tree(_module(wrong, monkeypatch), "tree_check_sample")
