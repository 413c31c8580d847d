"""The Audit view in a real browser: reached from a model's card, filtered by subject, paged on and back.

The session's ``mirbad up`` (conftest.py) is the master. A model is registered for this test and
edited through ``/api`` until its lines fill more than one page of the view (each edit is one
``model.update`` line), then the view is opened from the model's card on the Models page, which links to
``/audit?subject=<id>``. The model is deleted afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from tests.browser._portal import sign_in, tiny_definition

from mirbad_master.audit.page import AUDIT_PAGE_SIZE

if TYPE_CHECKING:
    from playwright.sync_api import Page
    from tests.browser.conftest import RunningMaster

pytestmark = [pytest.mark.browser, pytest.mark.llamacpp]

# The test id sits on the <input>; Quasar draws the field's error in the q-field around it.
FIELD = "xpath=ancestor::label[contains(@class, 'q-field')]"
EDITS = AUDIT_PAGE_SIZE + 2
"""Edits of the test's model: with its create, one full page and a second of three lines."""


@pytest.fixture
def audited_model(master: RunningMaster) -> Iterator[str]:
    """A model with one ``model.create`` and :data:`EDITS` ``model.update`` lines, deleted afterwards."""
    model_id = f"audit-{uuid.uuid4().hex[:6]}"
    with master.api() as api:
        api.post("/models", json=tiny_definition(master, model_id)).raise_for_status()
        for number in range(EDITS):
            edited = tiny_definition(master, model_id, maxNumSeqs=1 + number % 2)
            api.put(f"/models/{model_id}", json=edited).raise_for_status()
    yield model_id
    with master.api() as api:
        api.delete(f"/models/{model_id}")


def test_the_audit_view_filters_by_subject_and_pages_on(
    page: Page, master: RunningMaster, audited_model: str
) -> None:
    from playwright.sync_api import expect

    sign_in(page, master, "/models")
    page.get_by_test_id(f"audit-{audited_model}").click()
    page.wait_for_url(f"{master.url}/audit?subject={audited_model}")
    expect(page.get_by_test_id("audit-subject")).to_have_value(audited_model)
    rows = page.get_by_test_id("audit-entry")
    expect(rows).to_have_count(AUDIT_PAGE_SIZE)
    expect(page.get_by_test_id("audit-target")).to_have_text([audited_model] * AUDIT_PAGE_SIZE)
    expect(rows.first).to_contain_text("model.update")
    expect(page.get_by_test_id("audit-newer")).to_be_disabled()

    page.get_by_test_id("audit-older").click()
    expect(rows).to_have_count(EDITS + 1 - AUDIT_PAGE_SIZE)
    expect(rows.last).to_contain_text("model.create")  # the oldest line comes last
    expect(page.get_by_test_id("audit-older")).to_be_disabled()
    page.get_by_test_id("audit-newer").click()
    expect(rows).to_have_count(AUDIT_PAGE_SIZE)

    page.get_by_test_id("audit-action").fill("model.create")
    page.get_by_test_id("audit-apply").click()
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("user:admin")

    page.get_by_test_id("audit-since").fill("yesterday")
    page.get_by_test_id("audit-apply").click()
    expect(page.get_by_test_id("audit-since").locator(FIELD)).to_contain_text("not an ISO 8601 time")
    expect(rows).to_have_count(1)  # the last good page stays


def test_a_nodes_card_links_to_its_audit_lines(page: Page, master: RunningMaster) -> None:
    from playwright.sync_api import expect

    sign_in(page, master, "/nodes")
    page.get_by_test_id("audit-node-local").click()
    page.wait_for_url(f"{master.url}/audit?subject=local")
    expect(page.get_by_test_id("audit-subject")).to_have_value("local")
