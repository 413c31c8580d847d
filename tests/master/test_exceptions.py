"""mirbad_master's exceptions module draws its real exception tree, with a name per class."""

from __future__ import annotations

from tests._support.exception_tree import check_exception_tree

from mirbad_master import exceptions


def test_the_drawn_tree_is_the_real_one_with_unique_names() -> None:
    check_exception_tree(exceptions, "mirbad_master")
