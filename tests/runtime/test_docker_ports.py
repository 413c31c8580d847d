"""Choosing a model's host port: Docker's claims, host listeners and the lowest free one."""

from __future__ import annotations

import socket
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from mirbad_runtime._docker_ports import ports_taken_by_containers
from mirbad_runtime._ports import loopback_port_free, lowest_free_port


def test_mirbad_labels_and_any_published_port_are_taken() -> None:
    containers: list[dict[str, Any]] = [
        {"Labels": {"mirbad.model": "a", "mirbad.port": "8100"}, "Ports": []},  # exited, still claims it
        {"Labels": {"other": "x"}, "Ports": [{"PrivatePort": 80, "PublicPort": 8101, "Type": "tcp"}]},
        {
            "Labels": {"mirbad.port": "8102"},
            "Ports": [{"PrivatePort": 8000, "Type": "tcp"}],
        },  # not ours, unpublished
        {"Labels": None, "Ports": None},
        {"Labels": {"mirbad.model": "b", "mirbad.port": "garbage"}},
    ]

    assert ports_taken_by_containers(containers) == {8100, 8101}


def test_a_listening_port_is_not_free() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]

        assert not loopback_port_free(port)


@given(
    start=st.integers(1, 200),
    span=st.integers(0, 50),
    taken=st.sets(st.integers(1, 300)),
    busy=st.sets(st.integers(1, 300)),
)
def test_the_lowest_port_neither_taken_nor_busy_is_chosen(
    start: int, span: int, taken: set[int], busy: set[int]
) -> None:
    end = start + span
    port = lowest_free_port(start, end, taken, lambda candidate: candidate not in busy)

    free = [candidate for candidate in range(start, end + 1) if candidate not in taken | busy]
    assert port == (free[0] if free else None)
