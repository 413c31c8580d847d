"""The Nodes page's enroll form in a real browser: an agent's port or URL, and errors under their field."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import pytest
from tests.browser._portal import sign_in

if TYPE_CHECKING:
    from playwright.sync_api import Page
    from tests.browser.conftest import RunningMaster

pytestmark = pytest.mark.browser

# The test id sits on the <input>; Quasar draws the field's error in the q-field around it.
FIELD = "xpath=ancestor::label[contains(@class, 'q-field')]"


def test_the_enroll_form_takes_an_agent_port_and_draws_each_error_under_its_field(
    page: Page, master: RunningMaster
) -> None:
    from playwright.sync_api import expect

    name = f"gpu-{uuid.uuid4().hex[:6]}"
    sign_in(page, master, "/nodes")
    page.get_by_test_id("enroll-name").fill(name)
    page.get_by_test_id("enroll-address").fill("gpu-2.lan:99999")
    address = page.get_by_test_id("enroll-address").locator(FIELD)
    page.get_by_test_id("issue-token").click()
    expect(address).to_contain_text("not a port")
    expect(page.get_by_test_id("enroll-name").locator(FIELD)).not_to_contain_text("not a port")
    expect(page.get_by_test_id("enroll-command")).to_have_count(0)

    page.get_by_test_id("enroll-address").fill("127.0.0.1:18445")
    page.get_by_test_id("issue-token").click()
    expect(page.get_by_test_id("enroll-command")).to_contain_text(f"--name {name} --san 127.0.0.1")
    expect(address).not_to_contain_text("not a port")
