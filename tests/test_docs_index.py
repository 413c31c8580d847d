"""The "where things live" index of docs/architecture.md names only modules that exist, so it cannot rot."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
INDEX_TITLE = "## Where things live"
# `mirbad_router/_app.py`, `mirbad_orchestration/keys/`: a package, then a module or a folder.
_PATH = re.compile(r"`(mirbad_[a-z]+)/((?:[\w]+/)*(?:[\w]+\.py)?)`")


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
