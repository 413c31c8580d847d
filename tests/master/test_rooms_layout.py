"""The master's rooms keep their shape: one write path per feature, and nothing beside it writes.

The import contracts in ``pyproject.toml`` keep who imports what (a room's routes and page only from the
assembly, its private modules its own, ``ui/`` on no room). What imports cannot see is a page or a route
changing state through the composition it is handed (``services.models.save(...)``,
``services.audit.record(...)``) instead of through its room's actions: this test reads every module of
the rooms and of ``ui/`` and refuses such a call. A write through an object fetched first (an agent
client kept in a variable) is beyond what it reads; the room tests, which compare the audit lines of the
API and the portal, catch those.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import mirbad_master

MASTER = Path(mirbad_master.__file__).parent
ROOMS = (
    "audit",
    "backup_share",
    "backups",
    "benchmarks",
    "downloads",
    "keys",
    "models",
    "nodes",
    "releases",
    "restore",
    "services",
    "takeover",
    "tuning",
)
PORTAL_PARTS = ("page.py", "panels.py")
WRITE_VERBS = frozenset(
    [
        "save",
        "create",
        "add",
        "update",
        "delete",
        "remove",
        "record",
        "revoke",
        "set",
        "start",
        "stop",
        "restart",
        "cancel",
        "apply",
        "put",
        "write",
        "retry",
        "pull",
        "enroll",
        "issue",
        "register",
        "place",
        "forget",
        "clear",
        "import",
    ]
)
"""The words of a method name that change state (``set_keys_required``, ``whitelist_add``)."""


def composition_writes(source: str) -> list[str]:
    """The calls in ``source`` that change state through the composition, as ``line: chain``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        chain: list[str] = []
        target = node.func
        while isinstance(target, ast.Attribute):
            chain.insert(0, target.attr)
            target = target.value
        if isinstance(target, ast.Name):
            chain.insert(0, target.id)
        if "services" not in chain:
            continue
        reached = chain[chain.index("services") + 1 :]
        if "audit" in reached or (len(reached) >= 2 and WRITE_VERBS & set(reached[-1].split("_"))):
            found.append(f"{node.lineno}: {'.'.join(chain)}")
    return found


def outside_actions() -> list[Path]:
    """Every module of the rooms but their actions, and every module of ``ui/``."""
    modules = [
        path for room in ROOMS for path in sorted((MASTER / room).glob("*.py")) if path.name != "actions.py"
    ]
    return modules + sorted((MASTER / "ui").glob("*.py"))


def test_every_room_has_its_actions_routes_portal_part_and_room_test() -> None:
    tests = Path(__file__).parent
    for room in ROOMS:
        folder = MASTER / room
        assert (folder / "actions.py").is_file(), f"{room}: no actions.py"
        assert (folder / "api.py").is_file(), f"{room}: no api.py"
        assert any((folder / part).is_file() for part in PORTAL_PARTS), f"{room}: no page.py or panels.py"
        assert (tests / f"test_{room}_room.py").is_file(), f"{room}: no tests/master/test_{room}_room.py"


@pytest.mark.parametrize("path", outside_actions(), ids=lambda path: f"{path.parent.name}/{path.name}")
def test_no_page_route_or_portal_piece_writes_through_the_composition(path: Path) -> None:
    assert composition_writes(path.read_text(encoding="utf-8")) == [], (
        f"{path.parent.name}/{path.name} changes state through the composition: "
        "call the room's actions (its lock, its audit line) instead"
    )


@pytest.mark.parametrize(
    ("source", "caught"),
    [
        ("services.models.save(definition)", True),
        ("portal.services.audit.record('a', 'b', 'c')", True),
        ("await self.services.keys.set_required(True)", True),
        ("services.host_services.whitelist_add(node, name)", True),
        ("services.models.get(model_id)", False),
        ("services.cache.node(node_id)", False),
        ("services.client_of(node_id)", False),
        ("actions.start_model(services, model_id, actor)", False),
    ],
)
def test_the_check_tells_a_write_from_a_read(source: str, caught: bool) -> None:
    assert bool(composition_writes(source)) is caught
