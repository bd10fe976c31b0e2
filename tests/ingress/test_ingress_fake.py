"""Ingress over the fake node: Host routing, refusals (400/403/404/409/429/431/502),
keep-alive on one upstream connection, an upgrade spliced as raw bytes, wake of a
suspended sandbox, and open connections counting as activity."""

from __future__ import annotations

import asyncio
import datetime
import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from fastapi import FastAPI

from space.config import Settings
from space.config.server import IngressConfig
from tests.control.fakes import FakeNode, PowerNode

pytestmark = pytest.mark.ingress

DOMAIN = "localhost:8081"
GUEST_PORT = 8000


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(
        update={
            "ingress": IngressConfig(
                max_connections_per_sandbox=2, idle_seconds=30, connect_timeout=2
            )
        }
    )


@pytest.fixture
def fake_node() -> PowerNode:
    return PowerNode()


class Upstream:
    """The guest's server stand-in: answers each request with its path (keep-alive);
    after an `Upgrade` it echoes raw bytes."""

    def __init__(self) -> None:
        self.connections = 0
        self.heads: list[bytes] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                self.heads.append(head)
                if b"upgrade: websocket" in head.lower():
                    writer.write(b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n\r\n")
                    while data := await reader.read(1024):
                        writer.write(data)
                    return
                body = head.split(b" ")[1]
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
                await writer.drain()
        except asyncio.IncompleteReadError:
            pass
        finally:
            writer.close()


@pytest.fixture
async def ingress(app: FastAPI, client: httpx.AsyncClient) -> AsyncIterator[str]:
    """The app's ingress on a free port (the client fixture runs the lifespan)."""
    port = await app.state.ingress.start("127.0.0.1", 0)
    yield f"http://127.0.0.1:{port}"
    await app.state.ingress.aclose()


@pytest.fixture
async def upstream(fake_node: FakeNode) -> AsyncIterator[tuple[Upstream, Callable[[str], None]]]:
    guest = Upstream()
    server = await asyncio.start_server(guest.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]

    def expose(sandbox_id: str) -> None:
        fake_node.ports[sandbox_id, GUEST_PORT] = port

    yield guest, expose
    server.close()


async def _sandbox(client: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    response = await client.post("/v1/sandboxes", json=body)
    assert response.status_code == 201, response.text
    out: dict[str, Any] = response.json()
    return out


def _host(sandbox_id: str, port: int = GUEST_PORT) -> str:
    return f"{port}-{sandbox_id}.{DOMAIN}"


async def test_routes_by_host_and_keeps_alive(
    client: httpx.AsyncClient, ingress: str, upstream: tuple[Upstream, Callable[[str], None]]
) -> None:
    guest, expose = upstream
    sandbox = await _sandbox(client)
    expose(sandbox["id"])
    got = (await client.get(f"/v1/sandboxes/{sandbox['id']}")).json()["ingress"]
    assert got == {
        "url": f"http://{{port}}-{sandbox['id']}.{DOMAIN}",
        "public": True,
        "traffic_access_token": None,
    }
    async with httpx.AsyncClient(base_url=ingress, headers={"host": _host(sandbox["id"])}) as http:
        for path in ("/a", "/b?x=1", "/c"):
            response = await http.get(path)
            assert (response.status_code, response.text) == (200, path)
    assert guest.connections == 1  # three requests, one spliced connection


async def test_refusals_are_json(
    client: httpx.AsyncClient, ingress: str, upstream: tuple[Upstream, Callable[[str], None]]
) -> None:
    sandbox = await _sandbox(client)
    cases = {
        _host("sb-nosuch"): (404, "not_found"),
        "example.com": (404, "unknown_host"),
        f"99999-{sandbox['id']}.{DOMAIN}": (404, "unknown_host"),
        f"{GUEST_PORT}-{sandbox['id']}.localhost:9": (404, "unknown_host"),
        _host(sandbox["id"], 9): (502, "port_closed"),
    }
    async with httpx.AsyncClient(base_url=ingress) as http:
        for host, (status, code) in cases.items():
            response = await http.get("/", headers={"host": host})
            assert response.status_code == status, (host, response.text)
            assert response.json()["error"]["code"] == code
    assert "nothing listens on port 9" in response.json()["error"]["message"]


async def test_private_sandbox_needs_its_token(
    client: httpx.AsyncClient, ingress: str, upstream: tuple[Upstream, Callable[[str], None]]
) -> None:
    _guest, expose = upstream
    private = await _sandbox(client, allow_public_traffic=False)
    other = await _sandbox(client, allow_public_traffic=False)
    expose(private["id"])
    token = private["ingress"]["traffic_access_token"]
    assert private["ingress"]["public"] is False and token
    assert token != other["ingress"]["traffic_access_token"]
    async with httpx.AsyncClient(base_url=ingress) as http:
        for given in (
            {},
            {"e2b-traffic-access-token": "wrong"},
            {"e2b-traffic-access-token": other["ingress"]["traffic_access_token"]},
        ):
            response = await http.get("/", headers={"host": _host(private["id"]), **given})
            assert response.status_code == 403
            assert response.json()["error"]["code"] == "forbidden"
        headers = {"host": _host(private["id"]), "e2b-traffic-access-token": token}
        assert (await http.get("/ok", headers=headers)).text == "/ok"


async def _raw(ingress: str, data: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = ingress.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(data)
    return reader, writer


async def test_upgrade_is_spliced_and_held_as_activity(
    app: FastAPI,
    client: httpx.AsyncClient,
    ingress: str,
    upstream: tuple[Upstream, Callable[[str], None]],
) -> None:
    _guest, expose = upstream
    sandbox_id = (await _sandbox(client))["id"]
    expose(sandbox_id)
    head = f"GET /ws HTTP/1.1\r\nhost: {_host(sandbox_id)}\r\nupgrade: websocket\r\n"
    reader, writer = await _raw(ingress, (head + "connection: upgrade\r\n\r\n").encode())
    assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 101")
    writer.write(b"\x81\x05hello")
    assert await reader.readexactly(7) == b"\x81\x05hello"
    assert sandbox_id in app.state.space.activity.busy()
    writer.close()
    await writer.wait_closed()
    async with asyncio.timeout(10):
        while sandbox_id in app.state.space.activity.busy():
            await asyncio.sleep(0.01)


async def test_bounds(
    client: httpx.AsyncClient, ingress: str, upstream: tuple[Upstream, Callable[[str], None]]
) -> None:
    _guest, expose = upstream
    sandbox_id = (await _sandbox(client))["id"]
    expose(sandbox_id)
    request = f"GET / HTTP/1.1\r\nhost: {_host(sandbox_id)}\r\n\r\n".encode()
    sent = [
        b"GET / HTTP/1.1\r\nx: " + b"a" * 70_000 + b"\r\n\r\n",
        b"GET / HTTP/1.1\r\nno colon\r\n\r\n",
        request,
        request,  # the bound is 2 open connections per sandbox
        request,
    ]
    opened = [await _raw(ingress, data) for data in sent[:4]]
    try:
        statuses = [(await reader.readline()).split(b" ")[1] for reader, _w in opened]
        opened.append(await _raw(ingress, sent[4]))
        statuses.append((await opened[4][0].readline()).split(b" ")[1])
        assert statuses == [b"431", b"400", b"200", b"200", b"429"]
    finally:
        for _r, writer in opened:
            writer.close()
            await writer.wait_closed()


async def test_suspended_sandbox_is_restored_on_first_request(
    client: httpx.AsyncClient,
    ingress: str,
    upstream: tuple[Upstream, Callable[[str], None]],
    fake_node: PowerNode,
) -> None:
    _guest, expose = upstream
    sandbox_id = (await _sandbox(client))["id"]
    expose(sandbox_id)
    assert (await client.post(f"/v1/sandboxes/{sandbox_id}/suspend")).status_code == 200
    async with httpx.AsyncClient(base_url=ingress, timeout=30) as http:
        response = await http.get("/back", headers={"host": _host(sandbox_id)})
    assert (response.status_code, response.text) == (200, "/back")
    assert fake_node.restored == [sandbox_id]
    assert (await client.get(f"/v1/sandboxes/{sandbox_id}")).json()["state"] == "running"


def _self_signed(directory: Path) -> ssl.SSLContext:
    """A guest server's TLS context with a certificate it made itself."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "guest")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .sign(key, hashes.SHA256())
    )
    (directory / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(directory / "cert.pem", directory / "key.pem")
    return context


async def test_https_ports_get_tls_to_the_guest(
    client: httpx.AsyncClient,
    ingress: str,
    fake_node: FakeNode,
    upstream: tuple[Upstream, Callable[[str], None]],
    tmp_path: Path,
) -> None:
    """A port listed in `https_ports` is spoken to in TLS (the guest's own certificate,
    not verified); the client still speaks plain HTTP to the sandbox URL. A port listed
    whose server does not speak TLS is a 502 naming why."""
    tls_guest = Upstream()
    server = await asyncio.start_server(
        tls_guest.handle, "127.0.0.1", 0, ssl=_self_signed(tmp_path)
    )
    _plain_guest, expose_plain = upstream
    try:
        sandbox = await _sandbox(client, https_ports=[GUEST_PORT, 8443])
        assert sandbox["metadata"]["space.https_ports"] == f"{GUEST_PORT},8443"
        fake_node.ports[sandbox["id"], GUEST_PORT] = server.sockets[0].getsockname()[1]
        async with httpx.AsyncClient(base_url=ingress) as http:
            answer = await http.get("/over-tls", headers={"host": _host(sandbox["id"])})
            assert (answer.status_code, answer.text) == (200, "/over-tls")
        plain = await _sandbox(client, https_ports=[GUEST_PORT])
        expose_plain(plain["id"])  # a plain-HTTP server on a port said to speak TLS
        async with httpx.AsyncClient(base_url=ingress, timeout=30) as http:
            refused = await http.get("/", headers={"host": _host(plain["id"])})
            assert refused.status_code == 502
            assert refused.json()["error"]["code"] == "port_tls_failed"
        assert tls_guest.heads and tls_guest.heads[0].startswith(b"GET /over-tls ")
    finally:
        server.close()


async def test_https_ports_are_bounded(client: httpx.AsyncClient) -> None:
    for ports, field in (([0], "https_ports.0"), ([70000], "https_ports.0"),
                         (list(range(1, 66)), "https_ports")):  # fmt: skip
        answer = await client.post("/v1/sandboxes", json={"https_ports": ports})
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"]["field"] == field
