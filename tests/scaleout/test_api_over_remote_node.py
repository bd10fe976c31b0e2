"""The `/v1` API over a `RemoteNode`: a node whose server is down is a JSON 502 naming
the node as unavailable (not a 500), and the same calls work again once it is back."""

from __future__ import annotations

import httpx
import pytest

from space.api.app import create_app
from space.config import NodeLinkConfig, Settings
from space.store.keys import KeyRepo
from tests.control.fakes import PowerNode
from tests.scaleout.conftest import NodeServing, remote

pytestmark = pytest.mark.scaleout


async def test_node_down_is_a_json_5xx_and_the_api_recovers(
    settings: Settings, fake: PowerNode, token: str
) -> None:
    running = await NodeServing(fake, token, NodeLinkConfig()).start()
    try:
        async with remote(running.url, token, connect_timeout=2.0) as node:
            app = create_app(settings, node, run_controller=False)
            with app.state.space.db.session() as session:
                key = KeyRepo(session).issue("acme", None).key
            transport = httpx.ASGITransport(app=app)
            headers = {"Authorization": f"Bearer {key}"}
            async with (
                app.router.lifespan_context(app),
                httpx.AsyncClient(
                    transport=transport, base_url="http://space", headers=headers
                ) as http,
            ):
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
            app.state.space.db.dispose()
    finally:
        await running.stop()
