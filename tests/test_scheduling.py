"""The parallel run's order: long real-part files first, the real vLLM engine's files on one worker."""

from __future__ import annotations

import pytest
from tests._support.scheduling import SHARED_WORKER, pytest_xdist_make_scheduler

pytest_plugins = ["pytester"]


def test_long_files_come_first_longest_first_then_the_files_with_more_tests(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_many="def test_a(): pass\ndef test_b(): pass\ndef test_c(): pass\n",
        test_few="def test_one(): pass\n",
        test_long="import pytest\npytestmark = [pytest.mark.long(minutes=3)]\ndef test_x(): pass\n",
        test_longer="import pytest\npytestmark = [pytest.mark.long(minutes=9)]\ndef test_y(): pass\n",
    )

    result = pytester.runpytest_inprocess(
        "-p", "tests._support.scheduling", "--collect-only", "-q", "-n", "0"
    )

    files = [line.split("::", 1)[0] for line in result.outlines if "::" in line]
    assert files == [
        "test_longer.py",
        "test_long.py",
        "test_many.py",
        "test_many.py",
        "test_many.py",
        "test_few.py",
    ]


def test_under_loadfile_the_real_vllm_engine_files_are_one_unit_and_others_their_own(
    pytester: pytest.Pytester,
) -> None:
    config = pytester.parseconfig("--tx", "2*popen", "--dist", "loadfile")

    scheduler = pytest_xdist_make_scheduler(config, None)

    engine = {scheduler._split_scope(f"{file}::test_it") for file in SHARED_WORKER}
    assert len(engine) == 1
    assert (
        scheduler._split_scope("tests/vllm/test_vllm_parser.py::test_it") == "tests/vllm/test_vllm_parser.py"
    )
    assert config.option.loadscopereorder is False
    assert pytest_xdist_make_scheduler(pytester.parseconfig("-n", "2", "--dist", "load"), None) is None
