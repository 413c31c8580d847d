"""How the parallel run orders its work: the long real-part files first, the real vLLM engine on one worker.

xdist's ``loadfile`` hands out whole files, by default the files with the most tests first. The files
that take minutes (a real vLLM started again and again, the deploy images) hold few tests, so they came
last and the run waited on them after the other worker ran dry. Here a file marked ``long`` goes first,
the longest first, and the rest follow as xdist would order them. The files that start the real
vLLM engine share one worker, one after the other: on two cores, two engines starting at once each took
more than twice as long.
The simulator's tuning tests score wall-clock time, so they start at once on the other worker: behind
the engine's files they ran as that worker's load fell away, a drift the confirmation stage read as a
real difference.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

# Files whose tests run on one worker one after the other (by path, since xdist's controller schedules
# by node id and never sees the items or their marks).
SHARED_WORKER: dict[str, str] = {
    "tests/vllm/test_vllm_real.py": "the real vLLM engine",
    "tests/vllm/test_vllm_tuning.py": "the real vLLM engine",
    "tests/vllm/test_vllm_download.py": "the real vLLM engine",
}


def pytest_configure(config: pytest.Config) -> None:
    """Register the mark."""
    config.addinivalue_line(
        "markers",
        "long(minutes): a file of minutes on real parts; the parallel run starts it first, longest first",
    )


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Long files first (longest first), then files with more tests first; a file's tests stay together."""
    per_file = Counter(item.nodeid.split("::", 1)[0] for item in items)
    position = {id(item): index for index, item in enumerate(items)}

    def key(item: pytest.Item) -> tuple[float, int, str, int]:
        file = item.nodeid.split("::", 1)[0]
        mark = item.get_closest_marker("long")
        minutes = float(mark.kwargs.get("minutes", 1)) if mark is not None else 0.0
        return (-minutes, -per_file[file], file, position[id(item)])

    items.sort(key=key)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``--dist loadfile``: the collection's own order, and the shared-worker files as one unit."""
    if config.getoption("dist", None) != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling  # type: ignore[import-untyped]  # xdist only

    class _Scheduling(LoadFileScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            file = nodeid.split("::", 1)[0]
            return SHARED_WORKER.get(file, file)

    # The collection is already in the order wanted; xdist's reorder would sort it by test count again.
    config.option.loadscopereorder = False
    return _Scheduling(config, log)
