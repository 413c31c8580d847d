"""Test-wide fixtures: the real-component gate and JSON snapshots."""

from __future__ import annotations

import pytest
from syrupy.assertion import SnapshotAssertion
from syrupy.extensions.json import JSONSnapshotExtension
from tests._support.real_parts import PROBES, required_parts

# Shared fixtures of the real-component tiers (docker_client, image).
pytest_plugins = ["tests._support.docker_image"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip, or fail under MIRBAD_REQUIRE, every test whose real component is missing."""
    required = required_parts()
    for item in items:
        for part, probe in PROBES.items():
            if item.get_closest_marker(part) is None:
                continue
            missing = probe()
            if missing is None:
                continue
            if part in required:
                item.add_marker(pytest.mark.usefixtures("_fail_required_part"))
                item.user_properties.append(("missing_part", f"{part}: {missing}"))
            else:
                item.add_marker(pytest.mark.skip(reason=f"{part}: {missing}"))


@pytest.fixture
def _fail_required_part(request: pytest.FixtureRequest) -> None:
    reasons = [value for key, value in request.node.user_properties if key == "missing_part"]
    pytest.fail(f"MIRBAD_REQUIRE names a missing component: {'; '.join(reasons)}", pytrace=False)


@pytest.fixture
def snapshot_json(snapshot: SnapshotAssertion) -> SnapshotAssertion:
    """A syrupy snapshot stored as one pretty JSON file per assertion."""
    return snapshot.use_extension(JSONSnapshotExtension)


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Say which real components this run has, so a log shows what was really exercised."""
    lines: list[str] = []
    for part, probe in PROBES.items():
        missing = probe()
        lines.append(f"real part {part}: {'available' if missing is None else 'MISSING - ' + missing}")
    return lines
