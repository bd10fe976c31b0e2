from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest

from space.api.app import create_app
from space.config import Settings
from tests.control.fakes import FakeNode

SNAPSHOT = Path(__file__).parents[2] / "src" / "space" / "api" / "openapi.json"


async def test_healthz(client: httpx.AsyncClient) -> None:
    response = await client.get("/healthz", headers={"Authorization": ""})
    assert response.json() == {"status": "ok"}


async def test_metrics_count_requests_and_sandboxes(client: httpx.AsyncClient) -> None:
    await client.post("/v1/sandboxes", json={})
    await client.get("/v1/sandboxes/sbnope")
    text = (await client.get("/metrics")).text
    assert 'space_sandboxes{state="running"} 1.0' in text
    assert 'space_api_requests_total{method="POST",route="/v1/sandboxes",status="201"} 1.0' in text
    assert 'route="/v1/sandboxes/{sandbox_id}",status="404"' in text
    assert "space_api_request_duration_seconds_bucket" in text


def test_openapi_matches_the_checked_in_snapshot(settings: Settings) -> None:
    """Regenerate with SPACE_UPDATE_OPENAPI=1 after an intended API change."""
    app = create_app(settings, FakeNode())
    current = json.dumps(app.openapi(), indent=2, sort_keys=True) + "\n"
    app.state.space.db.dispose()
    if os.environ.get("SPACE_UPDATE_OPENAPI") == "1":
        SNAPSHOT.write_text(current)
    assert SNAPSHOT.read_text() == current


def test_openapi_has_the_contract_routes() -> None:
    paths = json.loads(SNAPSHOT.read_text())["paths"]
    base = "/v1/sandboxes/{sandbox_id}"
    for path in [
        "/v1/sandboxes",
        base,
        f"{base}/exec",
        f"{base}/commands",
        f"{base}/commands/{{command_id}}/events",
        f"{base}/commands/{{command_id}}/stdin",
        f"{base}/commands/{{command_id}}/signal",
        f"{base}/files",
        f"{base}/pause",
        f"{base}/resume",
        f"{base}/suspend",
        f"{base}/restore",
        "/v1/templates",
        "/v1/templates/{name}",
        "/v1/templates/builds/{build_id}/events",
        "/healthz",
        "/metrics",
    ]:
        assert path in paths, path


def test_settings_read_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SPACE_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("SPACE_MAX_BODY_BYTES", "1234")
    monkeypatch.setenv("SPACE_ACCEL", "tcg")
    monkeypatch.setenv("SPACE_TIMEOUT_CREATE", "9")
    monkeypatch.delenv("SPACE_DATABASE_URL", raising=False)
    settings = Settings()
    assert settings.database_url == f"sqlite:///{tmp_path / 'space.db'}"
    assert settings.server.max_body_bytes == 1234
    assert (settings.accel, settings.timeouts.create) == ("tcg", 9)
    assert settings.admin_key_path == tmp_path / "admin.key"
    monkeypatch.setenv("SPACE_ACCEL", "fast")
    with pytest.raises(ValueError):
        Settings()


async def test_metrics_show_warm_pool_sizes_hits_and_misses(client: httpx.AsyncClient) -> None:
    text = (await client.get("/metrics")).text
    assert 'space_warm_pool_ready{template="base"} 1.0' in text
    assert 'space_warm_pool_target{template="base"} 2.0' in text
    assert 'space_warm_pool_hits_total{template="base"} 0.0' in text
    assert 'space_warm_pool_misses_total{template="base"} 0.0' in text
