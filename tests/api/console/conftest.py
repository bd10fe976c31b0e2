"""Headless Chromium for the console tests: Debian's /usr/bin/chromium driven by
Playwright (from PyPI; no browser is ever downloaded), a fresh profile per test, and
a screenshot directory per test (`SPACE_CONSOLE_ARTIFACTS`, default
/tmp/space-console-artifacts) whose path the test run prints."""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, Page, sync_playwright

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(os.environ.get("SPACE_CONSOLE_ARTIFACTS", "/tmp/space-console-artifacts"))
TIMEOUT_MS = 60_000


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[BrowserContext]:
    """A Chromium context on a fresh user-data-dir, closed after the test."""
    assert shutil.which(CHROMIUM), f"{CHROMIUM} is missing: apt-get install chromium"
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),
            executable_path=CHROMIUM,
            headless=True,
            args=FLAGS,
            accept_downloads=True,
            viewport={"width": 1280, "height": 860},
        )
        context.set_default_timeout(TIMEOUT_MS)
        try:
            yield context
        finally:
            context.close()


class Shots:
    """Numbered full-page screenshots of one test."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.taken: list[Path] = []

    def take(self, page: Page, name: str) -> Path:
        path = self.directory / f"{len(self.taken) + 1:02d}-{name}.png"
        page.screenshot(path=str(path), full_page=True)
        self.taken.append(path)
        return path


@pytest.fixture
def shots(request: pytest.FixtureRequest) -> Iterator[Shots]:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name)
    directory = ARTIFACTS / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    directory.mkdir(parents=True, exist_ok=True)
    taken = Shots(directory)
    yield taken
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line(f"\nconsole screenshots ({len(taken.taken)}): {directory}")


def login(page: Page, base_url: str, key: str) -> None:
    page.goto(f"{base_url}/console/login")
    page.fill("#key", key)
    page.click("#login-form button[type=submit]")
    page.wait_for_url(f"{base_url}/console/sandboxes")
