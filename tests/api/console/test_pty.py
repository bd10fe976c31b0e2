"""`GET /v1/sandboxes/{id}/pty`: authentication, the terminal's bytes both ways, resize,
the message bound and the end of the process with the socket (fake node, real uvicorn)."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import AsyncIterator, Callable

import httpx
import pytest

from space.api.routes.pty import SUBPROTOCOL
from space.config import Settings
from space.config.secrets import KeysConfig
from space.seam.errors import NodeError
from space.seam.values import ProcessEvent
from tests.api.console.wsclient import Rejected, WsClient
from tests.conftest import ServerThread
from tests.control.fakes import FakeCommand, FakeNode


def key_protocol(key: str) -> str:
    return "bearer." + base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """Keys re-checked every 0.1 s, so a revocation shows at once."""
    return settings.model_copy(update={"keys": KeysConfig(revocation_check=0.1)})


@pytest.fixture
def acme(make_key: Callable[..., str]) -> str:
    return make_key("acme")


@pytest.fixture
def sandbox(server: ServerThread, acme: str) -> str:
    headers = {"Authorization": f"Bearer {acme}"}
    created = httpx.post(f"{server.url}/v1/sandboxes", json={}, headers=headers, timeout=30)
    assert created.status_code == 201, created.text
    sandbox_id: str = created.json()["id"]
    return sandbox_id


def open_pty(server: ServerThread, sandbox: str, key: str, query: str = "cmd=cat") -> WsClient:
    return WsClient.connect(
        server.url,
        f"/v1/sandboxes/{sandbox}/pty?{query}",
        subprotocols=[SUBPROTOCOL, key_protocol(key)],
    )


def commands(server: ServerThread, sandbox: str, key: str) -> list[dict[str, object]]:
    listed = httpx.get(
        f"{server.url}/console/api/sandboxes/{sandbox}/commands",
        headers={"Authorization": f"Bearer {key}"},
    )
    assert listed.status_code == 200, listed.text
    rows: list[dict[str, object]] = listed.json()["commands"]
    return rows


def test_no_key_is_refused_with_401(server: ServerThread, sandbox: str) -> None:
    with pytest.raises(Rejected) as refused:
        WsClient.connect(server.url, f"/v1/sandboxes/{sandbox}/pty", subprotocols=[SUBPROTOCOL])
    assert refused.value.status == 401
    assert refused.value.json()["error"] == {
        "code": "unauthorized",
        "message": "missing API key (Authorization or subprotocol)",
    }


def test_a_wrong_key_is_refused_with_401(server: ServerThread, sandbox: str) -> None:
    with pytest.raises(Rejected) as refused:
        open_pty(server, sandbox, "sk_not_a_key_0123456789abcdef")
    assert refused.value.status == 401
    assert refused.value.json()["error"]["message"] == "invalid API key"  # type: ignore[index]


def test_another_orgs_sandbox_is_a_404(
    server: ServerThread, sandbox: str, make_key: Callable[..., str]
) -> None:
    with pytest.raises(Rejected) as refused:
        open_pty(server, sandbox, make_key("globex"))
    assert refused.value.status == 404


def test_keystrokes_echo_and_resize_reaches_the_process(
    server: ServerThread, sandbox: str, acme: str, fake_node: FakeNode
) -> None:
    client = open_pty(server, sandbox, acme, "cmd=cat&rows=30&cols=100")
    try:
        assert client.subprotocol == SUBPROTOCOL  # never the key
        client.send_bytes(b"echo hi\r")
        assert client.read_until(b"echo hi\r") == b"echo hi\r"
        client.send_text(json.dumps({"type": "resize", "rows": 40, "cols": 120}))
        client.send_bytes(b"sync")
        client.read_until(b"sync")
        (process,) = fake_node.commands.values()
        assert process.sizes == [(40, 120)]
        assert [c["state"] for c in commands(server, sandbox, acme)] == ["running"]
    finally:
        client.close()


def test_the_process_ends_with_the_socket(
    server: ServerThread, sandbox: str, acme: str, fake_node: FakeNode
) -> None:
    client = open_pty(server, sandbox, acme)
    client.send_bytes(b"x")
    client.read_until(b"x")
    client.close()
    (process,) = fake_node.commands.values()
    rows = wait_for(lambda: [c for c in commands(server, sandbox, acme) if c["state"] != "running"])
    assert not process.running
    assert rows[0]["exit_code"] == 0  # its input ended: `cat` exits 0, the quota slot is freed


def test_the_exit_code_arrives_then_a_normal_close(
    server: ServerThread, sandbox: str, acme: str
) -> None:
    client = open_pty(server, sandbox, acme, "cmd=exit%203")
    try:
        assert client.receive() == b"failed\n"
        assert json.loads(str(client.receive())) == {"type": "exit", "exit_code": 3}
        assert client.wait_closed() == 1000
    finally:
        client.close()


def test_a_message_over_the_bound_closes_with_1009(
    server: ServerThread, sandbox: str, acme: str, fake_node: FakeNode
) -> None:
    client = open_pty(server, sandbox, acme)
    try:
        client.send_bytes(b"a" * (64 * 1024 + 1))
        assert client.wait_closed() == 1009
        (process,) = fake_node.commands.values()
        wait_for(lambda: not process.running)
    finally:
        client.close()


@pytest.mark.parametrize(
    ("query", "field"),
    [("rows=0", "rows"), ("cols=1001", "cols"), ("rows=abc", "rows"), ("cmd=", "cmd")],
)
def test_an_out_of_bounds_size_or_command_is_a_422(
    server: ServerThread, sandbox: str, acme: str, query: str, field: str
) -> None:
    with pytest.raises(Rejected) as refused:
        open_pty(server, sandbox, acme, query)
    assert refused.value.status == 422
    assert refused.value.json()["error"]["field"] == field  # type: ignore[index]


def test_a_text_frame_that_is_not_a_resize_closes_with_1003(
    server: ServerThread, sandbox: str, acme: str
) -> None:
    client = open_pty(server, sandbox, acme)
    try:
        client.send_text("<script>alert(1)</script>")
        assert client.wait_closed() == 1003
    finally:
        client.close()


def test_revoking_the_key_closes_the_terminal_with_1008(
    server: ServerThread, sandbox: str, acme: str
) -> None:
    client = open_pty(server, sandbox, acme)
    try:
        client.send_bytes(b"x")
        client.read_until(b"x")
        headers = {"Authorization": f"Bearer {acme}"}
        keys = httpx.get(f"{server.url}/v1/keys", headers=headers).json()["keys"]
        (mine,) = [k for k in keys if acme.startswith(k["prefix"])]
        revoked = httpx.delete(f"{server.url}/v1/keys/{mine['id']}", headers=headers)
        assert revoked.status_code == 204
        assert client.wait_closed() == 1008
    finally:
        client.close()


class LostOutput(FakeCommand):
    async def events(self) -> AsyncIterator[ProcessEvent]:
        yield ProcessEvent("stdout", b"before\n")
        raise NodeError("the agent connection closed")


def test_a_lost_process_closes_with_1011(
    server: ServerThread, sandbox: str, acme: str, fake_node: FakeNode
) -> None:
    async def start_lost(*_args: object, **_kwargs: object) -> FakeCommand:
        return LostOutput("cat", pid=1)

    fake_node.start_process = start_lost  # type: ignore[method-assign]
    client = open_pty(server, sandbox, acme)
    try:
        client.read_until(b"before\n")
        assert client.wait_closed() == 1011
    finally:
        client.close()


def test_the_authorization_header_works_too(server: ServerThread, sandbox: str, acme: str) -> None:
    client = WsClient.connect(
        server.url,
        f"/v1/sandboxes/{sandbox}/pty?cmd=echo%20hello",
        headers={"Authorization": f"Bearer {acme}"},
    )
    try:
        assert client.subprotocol is None
        assert client.read_until(b"hello\n") == b"hello\n"
    finally:
        client.close()


def wait_for(condition: Callable[[], object], timeout: float = 10.0) -> object:
    """Poll `condition` (a cheap read) until it is truthy."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.02)
    raise AssertionError("condition not met in time")
