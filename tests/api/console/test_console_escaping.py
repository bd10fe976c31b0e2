"""What a sandbox's metadata (or any API value) says is shown as text: markup in it
never runs or renders, on the list page or the detail page (fake node, real Chromium)."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from playwright.sync_api import BrowserContext, expect

from space.seam.values import EgressRecord
from tests.api.console.conftest import Shots, login
from tests.conftest import ServerThread
from tests.control.fakes import FakeNode

pytestmark = pytest.mark.console

HOSTILE = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'


def test_metadata_markup_is_shown_escaped(
    server: ServerThread, make_key: Callable[..., str], browser: BrowserContext, shots: Shots
) -> None:
    key = make_key("acme")
    created = httpx.post(
        f"{server.url}/v1/sandboxes",
        json={"metadata": {"note": HOSTILE}},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert created.status_code == 201, created.text
    sandbox_id = created.json()["id"]
    page = browser.new_page()
    blocked: list[str] = []
    page.on("console", lambda message: blocked.append(message.text))

    login(page, server.url, key)
    cell = page.locator("#sandboxes tbody tr .metadata")
    cell.wait_for()
    assert cell.inner_text() == f"note={HOSTILE}"
    assert page.locator("#sandboxes script, #sandboxes img").count() == 0
    shots.take(page, "sandboxes-escaped")

    page.click(f"text={sandbox_id}")
    page.wait_for_url(f"{server.url}/console/sandboxes/{sandbox_id}")
    detail = page.locator("#details .metadata")
    detail.wait_for()
    assert detail.inner_text() == f"note={HOSTILE}"
    assert page.locator("main script, main img").count() == 0
    assert page.evaluate("window.pwned") is None
    shots.take(page, "sandbox-escaped")


def test_egress_records_are_shown_escaped_newest_first(
    server: ServerThread,
    make_key: Callable[..., str],
    fake_node: FakeNode,
    browser: BrowserContext,
    shots: Shots,
) -> None:
    key = make_key("acme")
    created = httpx.post(
        f"{server.url}/v1/sandboxes",
        json={},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert created.status_code == 201, created.text
    sandbox_id = created.json()["id"]
    fake_node.egress[sandbox_id] = [
        EgressRecord(1.0, "dns", "allow", "allowed name", 1, host="old.example"),
        EgressRecord(2.0, "http", "deny", "not in policy", 1, host=HOSTILE, method="GET"),
    ]
    page = browser.new_page()
    login(page, server.url, key)
    page.goto(f"{server.url}/console/audit?sandbox={sandbox_id}")
    hosts = page.locator("#audit tbody tr .host")
    expect(hosts).to_have_count(2)
    assert hosts.all_inner_texts() == [HOSTILE, "old.example"]
    assert page.locator("#audit script, #audit img").count() == 0
    assert page.evaluate("window.pwned") is None
    shots.take(page, "audit-escaped")
