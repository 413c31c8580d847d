"""Test-wide fixtures: the real-component gate and JSON snapshots."""

from __future__ import annotations

import pytest
from syrupy.assertion import SnapshotAssertion
from syrupy.extensions.json import JSONSnapshotExtension
from tests._support.real_parts import PROBES, required_parts

# Shared fixtures of the real-component tiers (docker_client, image), the download tests' loopback
# sources (gguf_bytes, servers), and the parallel run's order.
pytest_plugins = [
    "tests._support.docker_image",
    "tests._support.download_sources",
    "tests._support.scheduling",
    "tests._support.chaos_report",
]


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
                item.user_properties.append(("missing_part", f"{part}: {missing}"))
            else:
                item.add_marker(pytest.mark.skip(reason=f"{part}: {missing}"))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Fail a test whose required part is missing before any of its fixtures starts anything.

    A ``usefixtures`` mark added at collection came too late for the item's fixtures (their list is
    fixed when the item is made), so such a test ran on as if the part were there.
    """
    _fail_if_missing(item)


def _fail_if_missing(item: pytest.Item) -> None:
    reasons = [str(value) for key, value in item.user_properties if key == "missing_part"]
    if reasons:
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
