"""The Backup & restore page in a real browser, against the session's ``mirbad up`` and its hostd.

A round trip through the page alone: back up now with a passphrase, see it listed, download it through
its one-time link, upload that file back with the passphrase, read the preview, restore, and watch the
progress end with the model started on the real llama-server. The model and the API key the backup
carries are deleted between the backup and the restore (through ``/api``), so the preview has something
new to show and the restore something to bring back. The destination form refuses a bad field under
that field, before anything reaches hostd.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Final

import pytest
from tests.browser._portal import READY_TIMEOUT_S, sign_in, tiny_definition

if TYPE_CHECKING:
    from playwright.sync_api import Page
    from tests.browser.conftest import RunningMaster

pytestmark = [pytest.mark.browser, pytest.mark.llamacpp]

PASSPHRASE: Final = "correct horse battery staple"
MODEL: Final = "restored-tiny"
KEY_NAME: Final = "restored-notebook"
WAIT_MS: Final = 60_000
"""The bound of what the page shows after an action (a restore starts the model on its node)."""
STOP_TIMEOUT_S: Final = 30.0


def _open(page: Page, master: RunningMaster) -> None:
    from playwright.sync_api import expect

    sign_in(page, master, "/backup")
    expect(page.get_by_test_id("backups-panel")).to_be_visible()


@pytest.fixture
def restorable(master: RunningMaster) -> Iterator[str]:
    """An auto-starting model and an API key for the backup to carry; gone again afterwards."""
    with master.api() as api:
        definition = tiny_definition(master, MODEL, autoStart=True)
        api.post("/models", json=definition).raise_for_status()
        key = api.post("/keys", json={"name": KEY_NAME, "requestsPerMinute": 60}).json()
    try:
        yield str(key["id"])
    finally:
        _forget(master, str(key["id"]))


def _forget(master: RunningMaster, key_id: str) -> None:
    with master.api() as api:
        if api.get(f"/models/{MODEL}").status_code == 200:
            api.post(f"/models/{MODEL}/stop")
            deadline = time.monotonic() + STOP_TIMEOUT_S
            while api.get(f"/models/{MODEL}").json()["status"]["state"] != "Stopped":
                assert time.monotonic() < deadline, f"{MODEL} did not stop within {STOP_TIMEOUT_S} s"
                time.sleep(0.2)
            api.delete(f"/models/{MODEL}").raise_for_status()
        if api.get(f"/keys/{key_id}").status_code == 200:
            api.delete(f"/keys/{key_id}").raise_for_status()


def _wait_ready(master: RunningMaster) -> None:
    with master.api() as api:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while (state := api.get(f"/models/{MODEL}").json()["status"]["state"]) != "Ready":
            assert state in ("Starting", "Stopped"), state
            assert time.monotonic() < deadline, f"{MODEL} was not Ready within {READY_TIMEOUT_S} s"
            time.sleep(0.2)


def test_a_backup_is_written_downloaded_uploaded_previewed_and_restored(
    page: Page, master: RunningMaster, restorable: str, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    _open(page, master)
    phrase = page.get_by_test_id("backup-passphrase")
    phrase.fill("too short")
    page.get_by_test_id("backup-now").click()
    # The refusal stands under the field it names, and nothing was written.
    expect(page.get_by_test_id("backups-panel")).to_contain_text("must have at least 12 characters")
    phrase.fill(PASSPHRASE)
    page.get_by_test_id("backup-now").click()
    expect(page.locator(".q-notification").last).to_contain_text("Backup written")
    written = sorted(master.backup_dir.iterdir()) if master.backup_dir is not None else []
    assert written, "the backup directory holds the backup"
    name = written[-1].name
    row = page.get_by_test_id("backup-row").filter(has_text=name)
    expect(row).to_contain_text("encrypted: yes")

    with page.expect_download() as downloading:
        row.get_by_role("button", name="Download").click()
    download = downloading.value
    assert download.suggested_filename == name
    saved = tmp_path / name
    download.save_as(saved)
    assert saved.read_bytes() == written[-1].read_bytes()
    assert json.loads(saved.read_bytes())["secrets"] is not None

    # What the backup carries is lost here, so the restore has something to bring back.
    with master.api() as api:
        api.delete(f"/models/{MODEL}").raise_for_status()
        api.delete(f"/keys/{restorable}").raise_for_status()

    page.get_by_test_id("restore-passphrase").fill(PASSPHRASE)
    page.get_by_test_id("restore-file").locator("input[type=file]").set_input_files(str(saved))
    expect(page.get_by_test_id("restore-file-name")).to_have_text(name)
    preview = page.get_by_test_id("restore-preview")
    expect(preview.get_by_test_id(f"preview-model-{MODEL}")).to_contain_text(
        f"{MODEL} ({MODEL}): new; folders present", timeout=WAIT_MS
    )
    expect(preview.get_by_test_id("preview-keys")).to_contain_text(KEY_NAME)

    page.get_by_test_id("restore-start").click()
    expect(page.get_by_test_id("restore-model-" + MODEL)).to_contain_text("started", timeout=WAIT_MS)
    expect(page.get_by_test_id("restore-state")).to_have_text("succeeded: done", timeout=WAIT_MS)
    _wait_ready(master)  # "started" is the start accepted; Ready follows once llama-server answers
    with master.api() as api:
        assert api.get(f"/keys/{restorable}").json()["name"] == KEY_NAME


def test_the_destination_form_refuses_a_bad_field(page: Page, master: RunningMaster) -> None:
    from playwright.sync_api import expect

    _open(page, master)
    status = page.get_by_test_id("backup-destination-status")
    expect(status).to_contain_text("No backup share", timeout=WAIT_MS)  # the session's hostd answered
    page.get_by_test_id("share-server").fill("nas,uid=0")
    page.get_by_test_id("share-share").fill("backups")
    page.get_by_test_id("share-username").fill("mirbad")
    page.get_by_test_id("share-password").fill("secret")
    page.get_by_test_id("share-test").click()
    # Under the field it names, in the master's words (the same check hostd makes).
    server = page.locator(".q-field", has=page.get_by_test_id("share-server"))  # the input's wrapper
    expect(server).to_contain_text("must be a host name or IPv4 address", timeout=WAIT_MS)
    hostd = master.hostd
    assert hostd is not None
    assert hostd.mount_calls() == []  # refused on the master: nothing was mounted
