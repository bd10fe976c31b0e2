"""The key lives only in the tab's session: no cookie, nothing in localStorage, another
tab must log in again, and *Log out* forgets it. The keys page creates a key (shown
once) and revokes it (fake node, real Chromium)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from playwright.sync_api import BrowserContext, expect

from tests.api.console.conftest import Shots, login
from tests.conftest import ServerThread

pytestmark = pytest.mark.console


def test_the_key_stays_in_the_tab_and_logout_forgets_it(
    server: ServerThread, make_key: Callable[..., str], browser: BrowserContext
) -> None:
    key = make_key("acme")
    page = browser.new_page()
    login(page, server.url, key)
    expect(page.locator("#whoami")).to_have_text("org acme · admin")
    assert browser.cookies() == []
    assert page.evaluate("localStorage.length") == 0
    assert page.evaluate("Object.values(sessionStorage)") == [key]

    other = browser.new_page()
    other.goto(f"{server.url}/console/keys")
    other.wait_for_url(f"{server.url}/console/login?next=%2Fconsole%2Fkeys")

    page.click("#logout")
    page.wait_for_url(f"{server.url}/console/login")
    assert page.evaluate("sessionStorage.length") == 0
    page.goto(f"{server.url}/console/sandboxes")
    page.wait_for_url(f"{server.url}/console/login?next=%2Fconsole%2Fsandboxes")


def test_a_wrong_key_is_refused_at_login(server: ServerThread, browser: BrowserContext) -> None:
    page = browser.new_page()
    page.goto(f"{server.url}/console/login")
    page.fill("#key", "sk_wrong_0123456789abcdefghij")
    page.click("#login-form button[type=submit]")
    expect(page.locator("#error")).to_have_text("That API key is not valid.")
    assert page.evaluate("sessionStorage.length") == 0


def test_keys_page_creates_and_revokes_a_key(
    server: ServerThread, make_key: Callable[..., str], browser: BrowserContext, shots: Shots
) -> None:
    page = browser.new_page()
    page.on("dialog", lambda dialog: dialog.accept())
    login(page, server.url, make_key("acme"))
    page.goto(f"{server.url}/console/keys")
    expect(page.locator("#keys tbody tr")).to_have_count(1)
    page.fill("#key-project", "web")
    page.select_option("#key-role", "developer")
    page.click("#key-form button[type=submit]")
    new_key = page.locator("#new-key-value")
    expect(page.locator("#new-key")).to_be_visible()
    created = new_key.inner_text()
    row = page.locator("#keys tbody tr", has_text="web")
    expect(row).to_contain_text(created[:12])
    expect(row.locator("td").nth(4)).to_have_text("developer")
    shots.take(page, "keys-created")
    row.locator("button", has_text="Revoke").click()
    expect(row.locator("td").nth(7)).not_to_have_text("")
    expect(row.locator("button")).to_have_count(0)
    shots.take(page, "keys-revoked")
