"""One-shot stats of a container that stops while dockerd answers."""

from __future__ import annotations

from typing import Any

import requests

from mirbad_runtime._docker_calls import read_stats


class _StatsApi:
    def __init__(self, error: Exception) -> None:
        self._error = error

    def stats(self, container_id: str, *, stream: bool, one_shot: bool) -> Any:
        raise self._error


class _Client:
    def __init__(self, error: Exception) -> None:
        self.api = _StatsApi(error)


def test_an_empty_stats_body_reads_as_a_container_that_is_going() -> None:
    # dockerd answers 200 with no body for a container that stopped mid-call; docker-py's decode fails.
    error = requests.exceptions.JSONDecodeError("Expecting value", "", 0)
    assert read_stats(_Client(error), "abc") == {}  # type: ignore[arg-type]
