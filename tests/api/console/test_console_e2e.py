"""Must show (issue 15, item 1): the console against `space up` and a real VM, driven in
headless Chromium — log in, create a sandbox, run a command and watch its output
stream, pause/resume and suspend/restore, type in the terminal and see the echo, upload and download
a file, look at templates, keys and the egress audit, delete the sandbox. Every page
is screenshotted (see `shots`)."""

from __future__ import annotations

import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from tests.api.console.conftest import Shots, login
from tests.e2e.server import SpaceServer

pytestmark = [pytest.mark.console, pytest.mark.vm, pytest.mark.netns]

CREATE_MS = 300_000
STREAM = "echo tick-1; sleep 3; echo tick-2"


@pytest.fixture
def space() -> Iterator[SpaceServer]:
    root = Path(tempfile.mkdtemp(prefix="space-console-"))
    server = SpaceServer(root)
    try:
        server.start()
        yield server
    finally:
        leaks = server.close()
        assert not leaks, "left on the host:\n" + "\n".join(leaks)


def test_console_end_to_end(
    space: SpaceServer, browser: BrowserContext, shots: Shots, tmp_path: Path
) -> None:
    page = browser.new_page()
    page.on("dialog", lambda dialog: dialog.accept())
    page.goto(f"{space.url}/console/sandboxes")
    page.wait_for_url(f"{space.url}/console/login?next=%2Fconsole%2Fsandboxes")
    shots.take(page, "login")
    login(page, space.url, space.key)
    expect(page.locator("#template option[value=base]")).to_have_count(1)
    shots.take(page, "sandboxes-empty")

    page.select_option("#template", "base")
    page.fill("#metadata", "purpose=console-test")
    page.click("#create")
    page.wait_for_url(f"{space.url}/console/sandboxes/sb*", timeout=CREATE_MS)
    sandbox_id = page.url.rsplit("/", 1)[1]
    expect(page.locator("[data-field=state]")).to_have_text("running")
    shots.take(page, "sandbox")

    run_and_watch_the_stream(page, shots)
    power_buttons(page, shots)
    terminal_echo(page, space.url, sandbox_id, shots)
    page.goto(f"{space.url}/console/sandboxes/{sandbox_id}")  # leaving the terminal ends it
    terminal_ended(space, sandbox_id)
    files_round_trip(page, space.url, sandbox_id, shots, tmp_path)
    other_pages(page, space.url, sandbox_id, shots)
    delete(page, space, sandbox_id, shots)


def run_and_watch_the_stream(page: Page, shots: Shots) -> None:
    page.fill("#cmd", STREAM)
    page.click("#run-form button[type=submit]")
    output = page.locator("#output")
    expect(output).to_contain_text("tick-1")
    # seen while the command still runs: the output streams, it is not fetched at the end
    expect(output).to_have_attribute("data-state", "streaming")
    assert "tick-2" not in output.inner_text()
    shots.take(page, "command-streaming")
    expect(output).to_contain_text("[exit 0]", timeout=30_000)
    assert output.inner_text().index("tick-1") < output.inner_text().index("tick-2")
    expect(page.locator("#commands tbody tr").first).to_contain_text("exited")
    shots.take(page, "command-exited")


def power_buttons(page: Page, shots: Shots) -> None:
    state = page.locator("[data-field=state]")
    page.click("[data-action=pause]")
    expect(state).to_have_text("paused")
    page.click("[data-action=resume]")
    expect(state).to_have_text("running")
    page.click("[data-action=suspend]")
    expect(state).to_have_text("suspended", timeout=120_000)
    shots.take(page, "sandbox-suspended")
    page.click("[data-action=restore]")
    expect(state).to_have_text("running", timeout=120_000)


def terminal_echo(page: Page, base: str, sandbox_id: str, shots: Shots) -> None:
    page.click("#terminal-link")
    page.wait_for_url(f"{base}/console/sandboxes/{sandbox_id}/terminal")
    expect(page.locator("#terminal")).to_have_attribute("data-state", "open")
    rows = page.locator("#terminal .xterm-rows")
    expect(rows).to_contain_text(re.compile(r"[#$]"))  # the shell's prompt
    page.locator("#terminal").click()
    page.keyboard.type("echo console-$((40+2))\n")
    expect(rows).to_contain_text("echo console-$((40+2))")  # the typed line, echoed
    expect(rows).to_contain_text("console-42")  # and what the shell made of it
    shots.take(page, "terminal")


def terminal_ended(space: SpaceServer, sandbox_id: str) -> None:
    """The terminal's shell ended with its socket: its quota slot is free again."""
    deadline = time.monotonic() + 30
    with space.client() as http:
        while time.monotonic() < deadline:
            listed = http.get(f"/console/api/sandboxes/{sandbox_id}/commands").json()
            terminals = [c for c in listed["commands"] if "pty" in c["argv"]]
            if terminals and all(c["state"] != "running" for c in terminals):
                return
            time.sleep(0.2)
    raise AssertionError(f"the terminal's process still runs: {terminals}")


def files_round_trip(page: Page, base: str, sandbox_id: str, shots: Shots, tmp_path: Path) -> None:
    payload = bytes(range(256)) * 64 + b"console upload\n"
    local = tmp_path / "upload.bin"
    local.write_bytes(payload)
    page.goto(f"{base}/console/sandboxes/{sandbox_id}/files?path=/tmp")
    page.set_input_files("#upload", str(local))
    page.click("#upload-form button[type=submit]")
    expect(page.locator("#upload-status")).to_have_text("uploaded upload.bin")
    row = page.locator("#entries tbody tr", has_text="upload.bin")
    expect(row).to_contain_text(str(len(payload)))
    shots.take(page, "files")
    with page.expect_download() as download:
        page.click("[data-download='upload.bin']")
    saved = tmp_path / "downloaded.bin"
    download.value.save_as(saved)
    assert download.value.suggested_filename == "upload.bin"
    assert saved.read_bytes() == payload


def other_pages(page: Page, base: str, sandbox_id: str, shots: Shots) -> None:
    page.goto(f"{base}/console/templates")
    expect(page.locator("#templates tbody")).to_contain_text("base")
    shots.take(page, "templates")
    page.goto(f"{base}/console/keys")
    expect(page.locator("#keys tbody tr")).not_to_have_count(0)
    shots.take(page, "keys")
    page.goto(f"{base}/console/audit?sandbox={sandbox_id}")
    expect(page.locator("#audit-sandbox")).to_have_value(sandbox_id)
    expect(page.locator("#audit-empty:not([hidden]), #audit tbody tr").first).to_be_visible()
    shots.take(page, "audit")
    page.goto(f"{base}/console/sandboxes")
    expect(page.locator("#sandboxes tbody")).to_contain_text(sandbox_id)
    shots.take(page, "sandboxes")


def delete(page: Page, space: SpaceServer, sandbox_id: str, shots: Shots) -> None:
    page.goto(f"{space.url}/console/sandboxes/{sandbox_id}")
    expect(page.locator("[data-field=state]")).to_have_text("running")
    page.click("[data-action=delete]")
    page.wait_for_url(f"{space.url}/console/sandboxes", timeout=120_000)
    expect(page.locator("#empty")).to_be_visible()
    shots.take(page, "deleted")
    with space.client() as http:
        assert http.get(f"/v1/sandboxes/{sandbox_id}").status_code == 404
