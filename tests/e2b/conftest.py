"""Fixtures for the E2B front: the unmodified `e2b` SDK pointed at a SPACE server.

`e2b_env` sets exactly what a user sets (`E2B_API_URL`, `E2B_SANDBOX_URL`,
`E2B_API_KEY`) for a uvicorn server in a thread over the fake node; the VM
tests use `vm_server` (a real `LocalNode`, module scope, see test_e2b_vm.py).
Under `SPACE_TEST_E2B_SDK` (a run spawned by tests/e2b/sdks.py) the session
refuses to start unless `import e2b` gives that version.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Callable, Iterator

import e2b
import pytest

from tests.conftest import ServerThread
from tests.control.fakes import FakeNode, PowerNode
from tests.e2b.sdks import EXPECTED_ENV


def pytest_configure(config: pytest.Config) -> None:
    expected = os.environ.get(EXPECTED_ENV)
    found = importlib.metadata.version("e2b")
    if expected and found != expected:
        raise pytest.UsageError(f"expected e2b=={expected}, imported {found} ({e2b.__file__})")


@pytest.fixture(autouse=True)
def _quick_keepalives(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPACE_E2B_KEEPALIVE_SECONDS", "0.2")


@pytest.fixture
def fake_node() -> FakeNode:
    return PowerNode()


def point_sdk_at(monkeypatch: pytest.MonkeyPatch, url: str, key: str) -> None:
    """The only change a user of E2B's hosted service makes."""
    monkeypatch.setenv("E2B_API_URL", url)
    monkeypatch.setenv("E2B_SANDBOX_URL", url)
    monkeypatch.setenv("E2B_API_KEY", key)
    monkeypatch.delenv("E2B_DOMAIN", raising=False)
    monkeypatch.delenv("E2B_ACCESS_TOKEN", raising=False)


@pytest.fixture
def e2b_env(
    server: ServerThread, make_key: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[ServerThread]:
    point_sdk_at(monkeypatch, server.url, make_key("acme"))
    yield server
