"""Clickjacking: a page of another origin cannot show the portal in a frame (issue 31 item 15).

The attacker's page is served by a real HTTP server on another loopback port (the same site as the
master, another origin). It frames the portal's sign-in page and, as a control, a page of its own:
Chromium shows the control and refuses the portal, saying why on the console.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Page
    from tests.browser.conftest import RunningMaster

pytestmark = pytest.mark.browser


def _attacker(target: str) -> type[BaseHTTPRequestHandler]:
    pages = {
        "/attack": f'<iframe id="portal" src="{target}"></iframe><iframe id="own" src="/own"></iframe>',
        "/own": '<p id="own-text">a page of the attacker</p>',
    }

    class Attacker(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = f"<!doctype html><html><body>{pages.get(self.path, '')}</body></html>".encode()
            self.send_response(200 if self.path in pages else 404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Keep the test's output clean."""

    return Attacker


@pytest.fixture
def attacker_url(master: RunningMaster) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _attacker(f"{master.url}/login"))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_another_origin_cannot_frame_the_portal(page: Page, master: RunningMaster, attacker_url: str) -> None:
    from playwright.sync_api import expect

    console: list[str] = []
    page.on("console", lambda message: console.append(message.text))
    page.goto(f"{attacker_url}/attack")
    # The control: frames work on this page, so the portal's absence is the portal's refusal.
    expect(page.frame_locator("#own").locator("#own-text")).to_have_text("a page of the attacker")
    portal = page.frame_locator("#portal")
    expect(portal.get_by_test_id("password")).to_have_count(0)
    framed = page.frame(name="portal")
    assert framed is not None
    assert framed.url.startswith("chrome-error:"), framed.url  # Chromium's page for a refused frame
    assert any("frame-ancestors" in text or "X-Frame-Options" in text for text in console), console
