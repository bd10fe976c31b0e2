"""Sandbox URLs into a real microVM under `space up`: a private sandbox runs a Python
HTTP/1.1 server (`guest_server.py`); from the host, by Host header on the ingress
port: 403 without its token; with it, keep-alive (one guest connection for several
requests), a streamed upload, server-sent events as they come, a WebSocket echo;
a closed port is a 502; a suspended sandbox is restored by a request; headless
Chromium loads a page from the sandbox URL itself (`*.localhost` resolves to
loopback in Chromium) whose script fetches from it."""

from __future__ import annotations

import socket
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import sync_playwright
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, Request, TextMessage

from tests.api.console.conftest import CHROMIUM, FLAGS
from tests.e2e.conftest import _host_reason
from tests.e2e.server import SpaceServer

pytestmark = [pytest.mark.vm, pytest.mark.netns, pytest.mark.ingress, pytest.mark.timeout(900)]
GUEST_PORT = 8000
TLS_PORT = 8443  # an `https_ports` port: the guest's server speaks TLS there
SELF_SIGNED = (
    "openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=guest -days 1"
    " -keyout /tmp/k.pem -out /tmp/c.pem 2>/dev/null"
)
TOKEN_HEADER = "e2b-traffic-access-token"


@dataclass
class Live:
    server: SpaceServer
    sandbox_id: str
    token: str
    url_pattern: str

    def host(self, port: int = GUEST_PORT) -> str:
        return self.url_pattern.replace("{port}", str(port)).removeprefix("http://")

    def client(self, **headers: str) -> httpx.Client:
        base = f"http://127.0.0.1:{self.server.ingress_port}"
        return httpx.Client(base_url=base, headers={"host": self.host(), **headers}, timeout=60)


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    reason = _host_reason()
    if reason:
        pytest.fail(reason)
    server = SpaceServer(
        Path(tempfile.mkdtemp(prefix="space-ingress-")),
        SPACE_NODE_WARM_POOL="{}",
        SPACE_TIMEOUT_CREATE="600",  # TCG on cores shared with other suites: slow, not stuck
    )
    try:
        server.start()
        with server.client() as http:
            created = http.post(
                "/v1/sandboxes", json={"allow_public_traffic": False, "https_ports": [TLS_PORT]}
            )
            assert created.status_code == 201, created.text
            sandbox_id = created.json()["id"]
            server.seen.add(sandbox_id)
            script = (Path(__file__).parent / "guest_server.py").read_bytes()
            put = http.put(
                f"/v1/sandboxes/{sandbox_id}/files", params={"path": "/tmp/s.py"}, content=script
            )
            assert put.status_code == 204, put.text
            started = http.post(
                f"/v1/sandboxes/{sandbox_id}/commands",
                json={"cmd": f"exec python3 /tmp/s.py {GUEST_PORT}"},
            )
            assert started.status_code == 201, started.text
            tls = f"{SELF_SIGNED} && exec python3 /tmp/s.py {TLS_PORT} /tmp/c.pem /tmp/k.pem"
            started = http.post(f"/v1/sandboxes/{sandbox_id}/commands", json={"cmd": tls})
            assert started.status_code == 201, started.text
            ingress = http.get(f"/v1/sandboxes/{sandbox_id}").json()["ingress"]
        live = Live(server, sandbox_id, ingress["traffic_access_token"], ingress["url"])
        _wait_listening(live)
        yield live
    finally:
        leaks = server.close()
    assert not leaks, "left on the host:\n" + "\n".join(leaks)


def _wait_listening(live: Live, port: int = GUEST_PORT) -> None:
    """Until the guest's server answers through the ingress (502 while it starts)."""
    deadline = time.monotonic() + 120
    with live.client(host=live.host(port), **{TOKEN_HEADER: live.token}) as http:
        while (status := http.get("/who").status_code) == 502 and time.monotonic() < deadline:
            time.sleep(0.2)
    assert status == 200


def test_http_and_websocket_reach_the_guest_by_host(live: Live) -> None:
    with live.client() as anonymous:
        refused = anonymous.get("/who")
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "forbidden"
    with live.client(**{TOKEN_HEADER: live.token}) as http:
        ports = {http.get("/who").text for _ in range(3)}
        assert len(ports) == 1  # keep-alive: one connection into the guest

        chunks = (b"x" * 65536 for _ in range(64))
        assert http.post("/count", content=chunks).text == str(64 * 65536)

        with http.stream("GET", "/events") as events:
            assert events.headers["content-type"] == "text/event-stream"
            data = [line for line in events.iter_lines() if line.startswith("data:")]
        assert data == [f"data: event {n}" for n in range(5)]

        closed = http.get("/", headers={"host": live.host(GUEST_PORT + 9)})
        assert closed.status_code == 502
        assert closed.json()["error"]["code"] == "port_closed"
    assert _websocket_echo(live, "hello through the ingress") == "hello through the ingress"


def _websocket_echo(live: Live, text: str) -> str:
    ws = WSConnection(ConnectionType.CLIENT)
    with socket.create_connection(("127.0.0.1", live.server.ingress_port), timeout=60) as sock:
        token = [(TOKEN_HEADER.encode(), live.token.encode())]
        sock.sendall(ws.send(Request(host=live.host(), target="/ws", extra_headers=token)))
        assert isinstance(_next_event(ws, sock), AcceptConnection)
        sock.sendall(ws.send(TextMessage(data=text)))
        reply = _next_event(ws, sock)
        sock.sendall(ws.send(CloseConnection(code=1000)))
    assert isinstance(reply, TextMessage)
    return str(reply.data)


def _next_event(ws: WSConnection, sock: socket.socket) -> object:
    for _ in range(100):  # bounded: each round reads what arrived
        for event in ws.events():
            return event
        data = sock.recv(65536)
        assert data, "the ingress closed the WebSocket"
        ws.receive_data(data)
    raise AssertionError("no WebSocket event")


def test_an_https_port_is_spoken_to_in_tls(live: Live) -> None:
    """The guest's server on an `https_ports` port speaks only TLS (its own self-signed
    certificate); the client speaks plain HTTP to the sandbox URL."""
    _wait_listening(live, TLS_PORT)
    with live.client(host=live.host(TLS_PORT), **{TOKEN_HEADER: live.token}) as http:
        uploaded = http.post("/count", content=b"x" * 100_000)
        assert (uploaded.status_code, uploaded.text) == (200, "100000")


def test_a_browser_loads_a_page_from_the_sandbox_url(live: Live, tmp_path: Path) -> None:
    url = live.url_pattern.replace("{port}", str(GUEST_PORT)) + "/page"
    assert ".localhost:" in url  # the default domain: no DNS, no /etc/hosts entry
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True, args=FLAGS
        )
        try:
            browser.set_default_timeout(60_000)
            browser.set_extra_http_headers({TOKEN_HEADER: live.token})
            page = browser.new_page()
            assert page.goto(url).status == 200  # type: ignore[union-attr]
            page.wait_for_function("document.getElementById('who').textContent !== 'loading'")
            assert page.text_content("#who").startswith("guest port ")  # type: ignore[union-attr]
        finally:
            browser.close()


def test_a_suspended_sandbox_is_restored_by_its_first_request(live: Live) -> None:
    with live.server.client() as api:
        suspended = api.post(f"/v1/sandboxes/{live.sandbox_id}/suspend")
        assert suspended.json()["state"] == "suspended", suspended.text
    with live.client(**{TOKEN_HEADER: live.token}) as http:
        http.timeout = httpx.Timeout(180)
        assert http.get("/who").status_code == 200  # the guest's server survived the snapshot
    with live.server.client() as api:
        assert api.get(f"/v1/sandboxes/{live.sandbox_id}").json()["state"] == "running"
