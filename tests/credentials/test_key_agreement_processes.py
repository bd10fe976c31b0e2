"""Two `space api` processes over one database, each with a data dir of its own (as two
hosts or two pods with an `emptyDir`): once the first has sealed a credential, a
second with key files of its own is refused at start, naming the setting, and one
given the first's files serves."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import ADMIN_KEY
from tests.e2e.server import free_port
from tests.waiting import wait_until

pytestmark = pytest.mark.credentials

HEADERS = {"Authorization": f"Bearer {ADMIN_KEY}"}
CREDENTIAL = {
    "name": "GITHUB_TOKEN",
    "application": {"kind": "header", "header": "Authorization", "template": "Bearer {value}"},
    "binding": {"hosts": ["api.github.com"]},
    "value": "ghp_a-value-sealed-by-the-first-process",
}


class Api:
    def __init__(self, db_url: str, data_dir: Path, **env: str) -> None:
        self.url = f"http://127.0.0.1:{free_port()}"
        environ = {
            **os.environ,
            "SPACE_DATABASE_URL": db_url,
            "SPACE_DATA_DIR": str(data_dir),
            "SPACE_BOOTSTRAP_KEY": ADMIN_KEY,
            **env,
        }
        command = [sys.executable, "-m", "space.cli", "api", "--port", self.url.rsplit(":", 1)[1]]
        self.process = subprocess.Popen(
            command, env=environ, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )

    def healthy(self) -> bool:
        assert self.process.poll() is None, self.process.communicate()[1]
        try:
            return httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.communicate(timeout=30)


@pytest.fixture
def apis() -> Iterator[list[Api]]:
    started: list[Api] = []
    yield started
    for api in started:
        api.stop()


def test_a_replica_with_other_key_files_is_refused_at_start(
    db_url: str, tmp_path: Path, apis: list[Api]
) -> None:
    first = Api(db_url, tmp_path / "a")
    apis.append(first)
    wait_until(first.healthy, 60)
    sealed = httpx.post(f"{first.url}/v1/credentials", json=CREDENTIAL, headers=HEADERS)
    assert sealed.status_code == 201, sealed.text

    alone = Api(db_url, tmp_path / "b")
    apis.append(alone)
    _, stderr = alone.process.communicate(timeout=60)
    assert alone.process.returncode == 2, stderr
    assert "SPACE_CREDENTIALS_" in stderr and "does not exist" in stderr, stderr

    keys = tmp_path / "a"
    shared = Api(
        db_url,
        tmp_path / "c",
        SPACE_CREDENTIALS_KEY_FILE=str(keys / "credentials.key"),
        SPACE_CREDENTIALS_PLACEHOLDER_KEY_FILE=str(keys / "credentials-placeholder.key"),
    )
    apis.append(shared)
    wait_until(shared.healthy, 60)
    listed = httpx.get(f"{shared.url}/v1/credentials", headers=HEADERS)
    assert [c["name"] for c in listed.json()["credentials"]] == ["GITHUB_TOKEN"], listed.text
