"""A model's measured memory: a process's resident set (/proc), a container's usage (Docker); issue 8."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirbad_runtime import container_memory_bytes, parse_vm_rss, process_rss_bytes

STATUS = "Name:\tllama-server\nVmPeak:\t  900000 kB\nVmRSS:\t  317440 kB\nThreads:\t4\n"


def test_the_resident_set_is_read_from_vm_rss() -> None:
    assert parse_vm_rss(STATUS) == 317440 * 1024


@pytest.mark.parametrize("text", ["", "Name:\tx\n", "VmRSS:\tlots kB\n", "VmRSS:\t12 MB\n", "VmRSS:\n"])
def test_a_status_without_a_readable_vm_rss_is_none(text: str) -> None:
    assert parse_vm_rss(text) is None


@given(st.text())
def test_any_status_text_reads_as_none_or_a_whole_number_of_kib(text: str) -> None:
    value = parse_vm_rss(text)
    assert value is None or (value >= 0 and value % 1024 == 0)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_the_resident_set_of_this_process_is_measured() -> None:
    measured = process_rss_bytes(os.getpid())
    assert measured is not None
    assert measured > 1024 * 1024


def test_a_process_that_is_gone_has_no_measure(tmp_path: Path) -> None:
    assert process_rss_bytes(4242, proc=tmp_path) is None


def test_a_fake_proc_folder_is_read(tmp_path: Path) -> None:
    (tmp_path / "77").mkdir()
    (tmp_path / "77" / "status").write_text(STATUS)
    assert process_rss_bytes(77, proc=tmp_path) == 317440 * 1024


def test_container_usage_leaves_out_the_inactive_page_cache_like_docker_stats() -> None:
    v2 = {"memory_stats": {"usage": 500_000_000, "stats": {"inactive_file": 100_000_000}}}
    v1 = {"memory_stats": {"usage": 500_000_000, "stats": {"total_inactive_file": 50_000_000}}}
    assert container_memory_bytes(v2) == 400_000_000
    assert container_memory_bytes(v1) == 450_000_000
    assert container_memory_bytes({"memory_stats": {"usage": 7}}) == 7


@pytest.mark.parametrize(
    "stats", [{}, {"memory_stats": {}}, {"memory_stats": {"usage": "x"}}, {"memory_stats": None}]
)
def test_a_container_without_memory_stats_has_no_measure(stats: dict[str, object]) -> None:
    assert container_memory_bytes(stats) is None


_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)


@given(
    st.one_of(
        st.dictionaries(st.sampled_from(["memory_stats", "cpu_stats"]), _JSONISH, max_size=2),
        st.builds(
            lambda usage, stats: {"memory_stats": {"usage": usage, "stats": stats}},
            st.integers(-10, 10**12),
            st.dictionaries(st.sampled_from(["inactive_file", "total_inactive_file", "cache"]), _JSONISH),
        ),
    )
)
def test_any_stats_document_reads_as_none_or_a_usage_within_the_total(stats: dict[str, object]) -> None:
    value = container_memory_bytes(stats)
    memory = stats.get("memory_stats")
    assert value is None or (isinstance(memory, dict) and 0 <= value <= memory["usage"])
