"""What a sandbox's metadata (or any API value) says is shown as text: markup in it
never runs or renders, on the list page or the detail page (fake node, real Chromium)."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from playwright.sync_api import BrowserContext

from tests.conftest import ServerThread
from tests.console.conftest import Shots, login

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
