"""The `/v1` API and the ingress over a `RemoteNode`: a node whose server is down is a
JSON 502 naming the node as unavailable (not a 500), the same calls work again once it
is back, and sandbox URLs reach guest ports through the node's tunnel (TLS too)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from space.api.app import create_app
from space.config import Settings
from space.config.node import NodeLinkConfig
from space.seam.protocol import NodeClient
from space.store.keys import KeyRepo
from tests.control.fakes import PowerNode
from tests.ingress.test_ingress_fake import Upstream, _self_signed
from tests.scaleout.conftest import NodeServing, remote, serving

pytestmark = pytest.mark.scaleout


@asynccontextmanager
async def api_over(
    settings: Settings, node: NodeClient
) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """The API as `space api` with `SPACE_NODE_URL` builds it, and a client of org acme."""
    app = create_app(settings, node, run_controller=False)
    with app.state.space.db.session() as session:
        key = KeyRepo(session).issue("acme", None).key
    transport = httpx.ASGITransport(app=app)
    headers = {"Authorization": f"Bearer {key}"}
    try:
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(
                transport=transport, base_url="http://space", headers=headers
            ) as http,
        ):
            yield app, http
    finally:
        app.state.space.db.dispose()


async def test_node_down_is_a_json_5xx_and_the_api_recovers(
    settings: Settings, fake: PowerNode, token: str
) -> None:
    running = await NodeServing(fake, token, NodeLinkConfig()).start()
    try:
        async with remote(running.url, token, connect_timeout=2.0) as node:
            async with api_over(settings, node) as (_app, http):
                created = await http.post("/v1/sandboxes", json={"template": "base"})
                assert created.status_code == 201, created.text
                sandbox = created.json()["id"]
                exec_path = f"/v1/sandboxes/{sandbox}/exec"
                ok = await http.post(exec_path, json={"cmd": "echo hi"})
                assert ok.json()["stdout"] == "hi\n"

                await running.stop()
                for response in (
                    await http.post(exec_path, json={"cmd": "echo hi"}),
                    await http.get(f"/v1/sandboxes/{sandbox}/files", params={"path": "/f"}),
                    await http.post(f"/v1/sandboxes/{sandbox}/commands", json={"cmd": "echo x"}),
                ):
                    assert response.status_code in (502, 503), response.text
                    error = response.json()["error"]
                    assert error["code"] == "node_error"
                    assert f"node {running.url} is unavailable" in error["message"]

                running = await NodeServing(
                    fake, token, NodeLinkConfig(), port=running.port
                ).start()
                again = await http.post(exec_path, json={"cmd": "echo back"})
                assert again.status_code == 200, again.text
                assert again.json()["stdout"] == "back\n"
                deleted = await http.delete(f"/v1/sandboxes/{sandbox}")
                assert deleted.status_code in (200, 202, 204), deleted.text
            assert sandbox in fake.destroyed
    finally:
        await running.stop()


async def test_sandbox_urls_reach_guest_ports_through_the_tunnel(
    settings: Settings, fake: PowerNode, token: str, tmp_path: Path
) -> None:
    plain, tls = Upstream(), Upstream()
    plain_server = await asyncio.start_server(plain.handle, "127.0.0.1", 0)
    tls_server = await asyncio.start_server(tls.handle, "127.0.0.1", 0, ssl=_self_signed(tmp_path))
    try:
        async with serving(fake, token) as running, remote(running.url, token) as node:
            async with api_over(settings, node) as (app, http):
                created = await http.post("/v1/sandboxes", json={"https_ports": [8443]})
                sandbox = created.json()["id"]
                fake.ports[sandbox, 8000] = plain_server.sockets[0].getsockname()[1]
                fake.ports[sandbox, 8443] = tls_server.sockets[0].getsockname()[1]
                port = await app.state.ingress.start("127.0.0.1", 0)
                try:
                    domain, url = settings.ingress.domain, f"http://127.0.0.1:{port}"
                    for guest_port, path in ((8000, "/plain"), (8443, "/over-tls")):
                        host = f"{guest_port}-{sandbox}.{domain}"
                        async with httpx.AsyncClient(base_url=url) as web:  # a connection each
                            answer = await web.get(path, headers={"host": host})
                        assert (answer.status_code, answer.text) == (200, path)
                    async with httpx.AsyncClient(base_url=url) as web:
                        closed = await web.get("/", headers={"host": f"8001-{sandbox}.{domain}"})
                    assert closed.status_code == 502
                    assert closed.json()["error"]["code"] == "port_closed"
                finally:
                    await app.state.ingress.aclose()
    finally:
        plain_server.close()
        tls_server.close()
    assert tls.heads and tls.heads[0].startswith(b"GET /over-tls ")
