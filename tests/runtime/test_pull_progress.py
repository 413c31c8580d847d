"""Docker's pull progress events summed into layers and bytes."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from mirbad_runtime import PullProgress

_STATUSES = ["Pulling fs layer", "Waiting", "Downloading", "Verifying Checksum", "Download complete",
             "Extracting", "Pull complete", "Already exists"]  # fmt: skip


def _apply(events: list[dict[str, Any]]) -> PullProgress:
    progress = PullProgress()
    for event in events:
        progress.apply(event)
    return progress


def test_downloads_count_and_extraction_does_not_count_twice() -> None:
    progress = _apply(
        [
            {"status": "Pulling from library/vllm", "id": "v1"},
            {"status": "Pulling fs layer", "progressDetail": {}, "id": "aaa"},
            {"status": "Already exists", "progressDetail": {}, "id": "bbb"},
            {"status": "Downloading", "progressDetail": {"current": 100, "total": 400}, "id": "aaa"},
            {"status": "Downloading", "progressDetail": {"current": 300, "total": 400}, "id": "aaa"},
            {"status": "Extracting", "progressDetail": {"current": 50, "total": 400}, "id": "aaa"},
        ]
    )
    assert (progress.current, progress.total) == (400, 400)
    assert [(layer.id, layer.status) for layer in progress.layers()] == [
        ("aaa", "Extracting"),
        ("bbb", "Already exists"),
    ]
    assert progress.status == "Pulling from library/vllm"
    assert progress.error is None


def test_an_error_event_is_kept_with_its_detail() -> None:
    progress = _apply(
        [{"error": "manifest unknown", "errorDetail": {"message": "manifest for x:v2 not found"}}]
    )
    assert progress.error == "manifest for x:v2 not found"


@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "id": st.sampled_from(["a", "b", "c", ""]),
                "status": st.sampled_from(_STATUSES),
                "progressDetail": st.fixed_dictionaries(
                    {"current": st.integers(-5, 10_000), "total": st.integers(-5, 10_000)}
                ),
            }
        ),
        max_size=40,
    )
)
def test_the_bytes_done_never_exceed_the_bytes_known(events: list[dict[str, Any]]) -> None:
    progress = _apply(events)
    assert 0 <= progress.current <= progress.total
