"""The Nodes page's enroll form: the agent's address as the API takes it, each error under its field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from nicegui import ui
from nicegui.testing.user import User
from tests._support.polling import eventually
from tests.master._stack import Master, running_master
from tests.master.test_ui_pages import portal_user

from mirbad_master.nodes.page import enrollment_target
from mirbad_orchestration.fleet import ENROLLMENT_TOKENS_FILE
from mirbad_protocol import InvalidFieldError


@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        ("", (None, None)),
        ("gpu-2.lan", ("gpu-2.lan", None)),
        ("10.0.0.7", ("10.0.0.7", None)),
        ("127.0.0.1:18445", ("127.0.0.1", "https://127.0.0.1:18445")),
        (" gpu-2.lan:9443 ", ("gpu-2.lan", "https://gpu-2.lan:9443")),
        ("fd00::7", ("fd00::7", None)),
        ("[fd00::7]:18445", ("fd00::7", "https://[fd00::7]:18445")),
        ("https://gpu-2.lan:18445", ("gpu-2.lan", "https://gpu-2.lan:18445")),
        ("https://[fd00::7]:18445/", ("fd00::7", "https://[fd00::7]:18445/")),
    ],
)
def test_the_address_field_takes_a_host_a_port_or_an_agent_url(
    typed: str, expected: tuple[str | None, str | None]
) -> None:
    assert enrollment_target(typed) == expected


@pytest.mark.parametrize(
    "typed", ["gpu-2:", "gpu-2:0", "gpu-2:70000", "gpu-2:http", "http://gpu-2:9443", "[fd00::7"]
)
def test_an_unusable_address_names_the_address_field(typed: str) -> None:
    with pytest.raises(InvalidFieldError) as refused:
        enrollment_target(typed)

    assert refused.value.field == "address"


@given(port=st.integers(min_value=1, max_value=65535))
def test_every_port_is_taken_after_a_host(port: int) -> None:
    assert enrollment_target(f"node-a:{port}") == ("node-a", f"https://node-a:{port}")


def _error_of(user: User, marker: str) -> Any:
    [element] = [e for e in user.find(marker=marker).elements if isinstance(e, ui.input)]
    return element.error


def _token_urls(master: Master) -> list[str | None]:
    document = json.loads((master.services.settings.data_dir / ENROLLMENT_TOKENS_FILE).read_text())
    return [token.get("agentUrl") for token in document["tokens"]]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("typed", "san", "agent_url"),
    [
        ("127.0.0.1:18445", "127.0.0.1", "https://127.0.0.1:18445"),
        ("https://gpu-2.lan:18445", "gpu-2.lan", "https://gpu-2.lan:18445"),
    ],
)
async def test_an_agent_port_or_url_is_taken_by_the_enroll_form(
    tmp_path: Path, typed: str, san: str, agent_url: str
) -> None:
    async with running_master(tmp_path) as master, portal_user(master) as user:
        await user.open("/nodes")
        await user.should_see(marker="node-local")
        user.find(marker="enroll-name").type("gpu-2")
        user.find(marker="enroll-address").type(typed)
        user.find(marker="issue-token").click()
        await user.should_see(f"--name gpu-2 --san {san}")
        urls = _token_urls(master)

    assert urls == [agent_url]


@pytest.mark.anyio
async def test_each_error_is_drawn_under_its_own_field(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master, portal_user(master) as user:
        await user.open("/nodes")
        await user.should_see(marker="node-local")
        user.find(marker="enroll-name").type("gpu-2")
        user.find(marker="enroll-address").type("gpu-2.lan:99999")
        user.find(marker="issue-token").click()
        await eventually(lambda: _error_of(user, "enroll-address") is not None, timeout_s=10)
        address_error, name_error = _error_of(user, "enroll-address"), _error_of(user, "enroll-name")
        user.find(marker="enroll-address").clear()
        user.find(marker="enroll-name").clear().type("bad name!")
        user.find(marker="issue-token").click()
        await eventually(lambda: _error_of(user, "enroll-name") is not None, timeout_s=10)
        await user.should_not_see("mirbad-agent enroll --master")
        second = (_error_of(user, "enroll-address"), _error_of(user, "enroll-name"))

    assert "not a port" in address_error
    assert name_error is None
    assert second[0] is None
    assert second[1]
