"""`/metrics` labels stay bounded whatever clients send, and show the fd budget."""

from __future__ import annotations

import re

import httpx
import pytest

from space.api.app import create_app
from space.config import Settings
from space.gateway.limits import Refusal
from space.gateway.metrics import GatewayMetrics
from tests.control.fakes import FakeNode

pytestmark = pytest.mark.hardening


async def test_made_up_methods_and_paths_add_no_series(client: httpx.AsyncClient) -> None:
    for n in range(50):
        await client.request(f"FOOBAR{n}", "/v1/sandboxes")
        await client.get(f"/no/such/path/{n}")
        await client.get(f"/v1/sandboxes/sb{n}")
    text = (await client.get("/metrics")).text
    series = [line for line in text.splitlines() if line.startswith("space_api_requests_total")]
    methods = {re.search(r'method="([^"]*)"', line).group(1) for line in series}  # type: ignore[union-attr]
    routes = {re.search(r'route="([^"]*)"', line).group(1) for line in series}  # type: ignore[union-attr]
    assert "FOOBAR0" not in text
    assert methods <= {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "other"}
    assert "other" in methods
    assert routes <= {"/v1/sandboxes", "/v1/sandboxes/{sandbox_id}", "unmatched", "/metrics"}
    assert len(series) < 10, series


async def test_metrics_show_the_file_descriptor_budget(client: httpx.AsyncClient) -> None:
    text = (await client.get("/metrics")).text
    assert re.search(r"^process_max_fds \d", text, re.MULTILINE), text
    assert re.search(r"^process_open_fds \d", text, re.MULTILINE), text


async def test_metrics_show_the_gateways_refusals(settings: Settings, fake_node: FakeNode) -> None:
    gateway = GatewayMetrics()
    gateway.refused_connection("https", Refusal.RATE)
    app = create_app(settings, fake_node, metrics_from=[gateway.registry])
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://space") as http:
            text = (await http.get("/metrics")).text
    finally:
        app.state.space.db.dispose()
    assert re.search(
        r'^space_gateway_refused_connections_total\{listener="https",reason="rate"\} 1\.0',
        text,
        re.MULTILINE,
    ), text
