"""The drawn exception tree of a library's ``exceptions`` module, read back and checked against the classes.

Each library's exceptions module opens with its tree drawn in the docstring (as httpx's does), after
a line that ends with ``::``, until the first blank line::

    MirbadRouterError(MirbadError)
    ├── RequestTooLargeError
    └── UpstreamError
        └── UpstreamConnectError

A class sits under its first base in the library. A line names the class alone when that base is its
only one; otherwise it spells every base as the class statement does (so a root, which has no parent
in the library, always does). :func:`check_exception_tree` walks ``__subclasses__()`` from the roots
and fails unless the drawing says exactly that, and unless every name in the tree is unique.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from dataclasses import dataclass
from types import ModuleType

__all__ = ["DrawnClass", "check_exception_tree", "draw_exception_tree", "parse_exception_tree"]

_LINE = re.compile(
    r"^(?P<prefix>(?:│   |    )*)(?:(?P<branch>[├└]── ))?(?P<name>\w+)(?:\((?P<bases>[^)]*)\))?$"
)


@dataclass(frozen=True)
class DrawnClass:
    """One line of a drawn tree.

    Attributes:
        name: the class's name.
        parent: the name of the line it hangs under; None for a root.
        bases: the bases the line spells out; None when it names the class alone.
    """

    name: str
    parent: str | None
    bases: tuple[str, ...] | None


def parse_exception_tree(docstring: str) -> list[DrawnClass]:
    """Read the tree drawn in ``docstring`` (see the module docstring for the shape).

    Raises:
        ValueError: no tree, or a line that is not one of a tree.
    """
    lines = inspect.cleandoc(docstring).splitlines()
    try:
        start = next(index for index, line in enumerate(lines) if line.rstrip().endswith("::")) + 1
    except StopIteration:
        raise ValueError("the docstring draws no tree (no line ending with '::')") from None
    while start < len(lines) and not lines[start].strip():
        start += 1
    block: list[str] = []
    for line in lines[start:]:
        if not line.strip():
            break
        block.append(line)
    if not block:
        raise ValueError("the tree after '::' is empty")
    indent = min(len(line) - len(line.lstrip()) for line in block)
    drawn: list[DrawnClass] = []
    path: list[str] = []
    for line in block:
        match = _LINE.match(line[indent:].rstrip())
        if match is None:
            raise ValueError(f"not a line of a tree: {line!r}")
        depth = len(match["prefix"]) // 4 + (1 if match["branch"] else 0)
        if depth > len(path) or (match["branch"] is None and match["prefix"]):
            raise ValueError(f"a line out of place in the tree: {line!r}")
        del path[depth:]
        bases = None if match["bases"] is None else tuple(b.strip() for b in match["bases"].split(","))
        drawn.append(DrawnClass(match["name"], path[-1] if path else None, bases))
        path.append(match["name"])
    return drawn


def draw_exception_tree(roots: list[type[BaseException]], members: set[type[BaseException]]) -> str:
    """Draw the tree of ``members`` under ``roots`` in the shape :func:`parse_exception_tree` reads."""
    lines: list[str] = []

    def label(cls: type[BaseException], parent: type[BaseException] | None) -> str:
        if parent is not None and cls.__bases__ == (parent,):
            return cls.__name__
        return f"{cls.__name__}({', '.join(base.__name__ for base in cls.__bases__)})"

    def walk(cls: type[BaseException], prefix: str) -> None:
        children = [
            child
            for child in cls.__subclasses__()
            if child in members and _tree_parent(child, members) is cls
        ]
        for index, child in enumerate(children):
            last = index == len(children) - 1
            lines.append(f"{prefix}{'└── ' if last else '├── '}{label(child, cls)}")
            walk(child, prefix + ("    " if last else "│   "))

    for root in roots:
        lines.append(label(root, None))
        walk(root, "")
    return "\n".join(lines)


def check_exception_tree(exceptions: ModuleType, package: str) -> None:
    """Fail unless ``exceptions``'s docstring draws the real tree of ``package``'s exceptions.

    The tree holds every exception class of the exceptions module and every public subclass of them
    that the package defines elsewhere (private ones, ``_Name``, are a module's own business); the
    roots are the module's classes with no base in the tree. Every submodule is imported first, so
    ``__subclasses__()`` sees them all.

    Raises:
        AssertionError: the drawing differs from the classes (the message draws the real tree), or two
            classes of the tree share a name.
    """
    _import_all(package)
    own = [
        value
        for value in vars(exceptions).values()
        if inspect.isclass(value)
        and issubclass(value, BaseException)
        and value.__module__ == exceptions.__name__
    ]
    members: set[type[BaseException]] = set()
    pending = list(own)
    while pending:
        cls = pending.pop()
        if cls in members:
            continue
        members.add(cls)
        pending.extend(
            child
            for child in cls.__subclasses__()
            if _in_package(child, package) and not child.__name__.startswith("_")
        )
    names = sorted(cls.__name__ for cls in members)
    repeated = sorted({name for name in names if names.count(name) > 1})
    assert not repeated, f"{package}: names given to more than one exception class: {repeated}"
    roots = sorted((cls for cls in members if _tree_parent(cls, members) is None), key=_defined_order)
    real = {
        cls.__name__: DrawnClass(
            cls.__name__,
            None if (parent := _tree_parent(cls, members)) is None else parent.__name__,
            None
            if parent is not None and cls.__bases__ == (parent,)
            else tuple(b.__name__ for b in cls.__bases__),
        )
        for cls in members
    }
    assert exceptions.__doc__ is not None, f"{exceptions.__name__} has no docstring"
    drawn = parse_exception_tree(exceptions.__doc__)
    drawn_names = [line.name for line in drawn]
    expected = draw_exception_tree(roots, members)
    assert len(drawn_names) == len(set(drawn_names)), (
        f"{exceptions.__name__}: a class drawn twice; the real tree is:\n{expected}"
    )
    assert {line.name: line for line in drawn} == real, (
        f"{exceptions.__name__}'s drawn tree is not the real one, which is:\n{expected}"
    )


def _tree_parent(cls: type[BaseException], members: set[type[BaseException]]) -> type[BaseException] | None:
    return next((base for base in cls.__bases__ if base in members), None)


def _in_package(cls: type, package: str) -> bool:
    return cls.__module__ == package or cls.__module__.startswith(package + ".")


def _defined_order(cls: type) -> tuple[str, int]:
    try:
        return cls.__module__, inspect.getsourcelines(cls)[1]
    except (OSError, TypeError):
        return cls.__module__, 0


def _import_all(package: str) -> None:
    root = importlib.import_module(package)
    for module in pkgutil.walk_packages(getattr(root, "__path__", []), package + "."):
        importlib.import_module(module.name)
