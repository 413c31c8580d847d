"""The "where things live" index of docs/architecture.md names only modules that exist, so it cannot rot.

A row that says "not yet" must not name a module that exists: when the work lands, the row is stale.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
INDEX_TITLE = "## Where things live"
# `mirbad_router/_app.py`, `mirbad_orchestration/keys/`: a package, then a module or a folder.
_PATH = re.compile(r"`(mirbad_[a-z]+)/((?:[\w]+/)*(?:[\w]+\.py)?)`")
# `mirbad_orchestration.backups`: the dotted spelling of a package or module.
_DOTTED = re.compile(r"`(mirbad_[a-z]+)((?:\.\w+)+)`")


def index_text() -> str:
    """The index section of docs/architecture.md (up to the next second-level heading)."""
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    start = text.index(INDEX_TITLE)
    end = text.find("\n## ", start + len(INDEX_TITLE))
    return text[start : end if end != -1 else len(text)]


def package_root(package: str) -> Path | None:
    """The source folder of a workspace package (``libs/*/src/<package>`` or ``apps/*/src/<package>``)."""
    found = sorted(REPO.glob(f"libs/*/src/{package}")) + sorted(REPO.glob(f"apps/*/src/{package}"))
    return found[0] if found else None


def entries() -> list[tuple[str, str]]:
    """Every (package, path below it) the index names, each once."""
    return sorted({(m.group(1), m.group(2)) for m in _PATH.finditer(index_text())})


def _exists(package: str, below: str) -> bool:
    root = package_root(package)
    if root is None:
        return False
    target = root / below
    return target.is_dir() if below.endswith("/") or not below else target.is_file()


def test_the_index_names_the_modules_of_every_package() -> None:
    names = entries()

    # A pattern that stopped matching would pass every other check vacuously.
    assert len(names) > 100
    packages = {package for package, _ in names}
    assert {"mirbad_protocol", "mirbad_runtime", "mirbad_orchestration", "mirbad_router"} <= packages
    assert {"mirbad_master", "mirbad_agent", "mirbad_client"} <= packages


@pytest.mark.parametrize(("package", "below"), entries(), ids=lambda v: str(v))
def test_every_named_module_exists(package: str, below: str) -> None:
    assert _exists(package, below), f"docs/architecture.md names {package}/{below}, which does not exist"


def not_yet_rows() -> list[str]:
    """The index's table rows (and paragraphs) that say the work has not landed."""
    return [line for line in index_text().splitlines() if "not yet" in line.lower()]


def named_modules(line: str) -> list[tuple[str, str]]:
    """Every (package, path below it) a line names, in the slash or the dotted spelling."""
    named = [(m.group(1), m.group(2)) for m in _PATH.finditer(line)]
    for m in _DOTTED.finditer(line):
        parts = m.group(2).strip(".").split(".")
        named += [(m.group(1), "/".join(parts) + "/"), (m.group(1), "/".join(parts) + ".py")]
    return named


def test_the_index_has_not_yet_rows_to_check() -> None:
    # The check below would pass vacuously if the rows' wording changed.
    assert not_yet_rows()


@pytest.mark.parametrize("line", not_yet_rows(), ids=lambda line: line[:60])
def test_a_not_yet_row_names_no_module_that_exists(line: str) -> None:
    # A bare package (`mirbad_hostd/`) says where the work will go, not that it landed.
    existing = [
        f"{package}/{below}" for package, below in named_modules(line) if below and _exists(package, below)
    ]
    assert not existing, f"docs/architecture.md says 'not yet' beside {existing}, which exist: {line}"


def test_a_stale_not_yet_row_is_caught() -> None:
    # The row this check was written for: the Releases page had landed while the index said "not yet".
    stale = "| Releases page | not yet — `mirbad_master/releases/page.py` (`mirbad_master.ui`) |"
    assert [f"{p}/{b}" for p, b in named_modules(stale) if b and _exists(p, b)] == [
        "mirbad_master/releases/page.py",
        "mirbad_master/ui/",
    ]
