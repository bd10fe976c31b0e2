"""Credentials on the wire: the real gateway and firewall in front of a namespace
guest (stock curl), upstream a fake API in the red-team fake internet that records
what it received and echoes headers and body back in many small chunks.

Asserted from both ends: what the upstream received (the real value, or nothing
at all), what the guest saw (only its placeholder), and the audit chain."""

from __future__ import annotations

import asyncio
import json
import secrets
import shutil
import socket
import ssl
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

import h11
import pytest
import pytest_asyncio

from space.credentials.audit import verify
from space.credentials.model import (
    BasicApply,
    Binding,
    Credential,
    HeaderApply,
    PlaceholderApply,
    Policy,
    RateLimit,
)
from space.credentials.scopes import CredentialView, SandboxRef, placeholder, resolve
from space.gateway import Gateway
from space.gateway.ca import server_context
from space.node.network.egress import Egress
from tests.redteam.fakenet import FakeInternet
from tests.redteam.vethguest import Result, VethGuest

pytestmark = [
    pytest.mark.credentials,
    pytest.mark.netns,
    pytest.mark.asyncio(loop_scope="module"),
]

API_IP = "198.51.100.31"
API = "api.cred.test"
OTHER = "other.cred.test"
POLICY = {"mode": "allowlist", "allow": [API, OTHER]}
ORG = "org1"
SECRET = b"placeholder-secret-for-tests"
CURL = ("curl", "-sS", "--max-time", "15")


@dataclass
class FakeApi:
    """Records each request's headers and body; echoes them in 7-byte chunks."""

    received: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)

    def saw(self, needle: str) -> bool:
        return any(
            needle in path or needle in json.dumps(headers) or needle.encode() in body
            for path, headers, body in self.received
        )

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER)
        try:
            while isinstance(event := await _next(conn, reader), h11.Request):
                body = b""
                while not isinstance(part := await _next(conn, reader), h11.EndOfMessage):
                    if isinstance(part, h11.Data):
                        body += bytes(part.data)
                headers = {n.decode(): v.decode() for n, v in event.headers}
                self.received.append((event.target.decode(), headers, body))
                echo = json.dumps(headers).encode() + b"\n" + body
                auth = headers.get("authorization", "").encode()
                reply = [("content-type", "text/plain"), ("x-echo-authorization", auth)]
                writer.write(conn.send(h11.Response(status_code=200, headers=reply)) or b"")
                for i in range(0, len(echo), 7):
                    writer.write(conn.send(h11.Data(data=echo[i : i + 7])) or b"")
                    await writer.drain()
                writer.write(conn.send(h11.EndOfMessage()) or b"")
                await writer.drain()
                conn.start_next_cycle()
        except (OSError, h11.ProtocolError, TimeoutError, ssl.SSLError):
            pass
        finally:
            writer.close()


async def _next(conn: h11.Connection, reader: asyncio.StreamReader) -> object:
    while (event := conn.next_event()) is h11.NEED_DATA:
        conn.receive_data(await asyncio.wait_for(reader.read(65536), 15))
    return event


@dataclass
class World:
    internet: FakeInternet
    api: FakeApi
    egress: Egress
    guest: VethGuest
    ca: str
    values: dict[tuple[str, int], str]
    protocol: str = "--http1.1"

    @property
    def gateway(self) -> Gateway:
        return self.egress.gateway

    async def curl(self, *args: str) -> Result:
        env = ("env", f"SSL_CERT_FILE={self.ca}", f"CURL_CA_BUNDLE={self.ca}")
        protocol = "--http1.1" if args[-1].startswith("http://") else self.protocol
        return await self.guest.run(*env, *CURL, protocol, "-i", *args)

    def reveal(self, credential_id: str, version: int) -> str:
        return self.values[(credential_id, version)]

    def give(self, *credentials: Credential) -> CredentialView:
        """Resolve the guest's view over the one it holds (the next version) and push it."""
        held = self.gateway.gate(self.guest.sandbox_id).credentials
        ref = SandboxRef(self.guest.sandbox_id, ORG, "proj", "base")
        view = resolve(
            ref,
            credentials,
            [],
            now=datetime.now(UTC),
            placeholder_secret=SECRET,
            previous=held.view.stamp if held is not None else None,
        )
        self.gateway.set_credentials(self.guest.sandbox_id, ORG, view, self.reveal)
        return view

    def audit(self, credential_id: str) -> list[str]:
        records = self.gateway.credential_audit.records
        return [r.decision for r in records if r.credential_id == credential_id]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    assert shutil.which("curl"), "the namespace guest runs the host's curl"
    directory = tmp_path_factory.mktemp("credwire")
    internet = await FakeInternet.start(directory)
    api = FakeApi()
    veth = VethGuest()
    egress = Egress(internet.egress_config(), name=veth.prefix)
    servers: list[asyncio.Server] = []
    try:
        subprocess.run(
            ["ip", "-n", internet.netns, "addr", "add", f"{API_IP}/32", "dev", "lo"], check=True
        )
        for name in (API, OTHER):
            internet.dns.poison(name, API_IP)
        servers = await _start_api(internet, api)
        net = veth.create(egress.gateway)
        await egress.attach(veth.sandbox_id, net, POLICY)
        ca = directory / "gateway-ca.pem"
        ca.write_bytes(egress.gateway.gate(veth.sandbox_id).ca.certificate_pem)
        yield World(internet, api, egress, veth, str(ca), {})
    finally:
        for server in servers:
            server.close()
        await egress.close()
        veth.delete()
        await internet.close()


async def _start_api(internet: FakeInternet, api: FakeApi) -> list[asyncio.Server]:
    servers: list[asyncio.Server] = []
    context = server_context()
    context.set_alpn_protocols(["http/1.1"])

    def on_sni(sslobj: ssl.SSLObject, name: str | None, _: ssl.SSLContext) -> None:
        sslobj.context = internet.ca.context_for(name or API)

    context.sni_callback = on_sni  # type: ignore[assignment]
    for port, tls in ((443, context), (80, None)):
        sock = await internet._sockets.listener(internet.netns, socket.SOCK_STREAM, (API_IP, port))
        servers.append(await asyncio.start_server(api.serve, sock=sock, ssl=tls))
    return servers


@pytest.fixture(params=["--http1.1", "--http2"])
def w(world: World, request: pytest.FixtureRequest) -> World:
    """The world, with the guest's curl speaking HTTP/1.1 or HTTP/2 to the gateway."""
    world.protocol = request.param
    return world


def credential(
    world: World, application: object, binding: Binding, value: str, **kw: object
) -> Credential:
    now = datetime.now(UTC)
    cid = f"cred_{secrets.token_hex(6)}"
    world.values[(cid, 1)] = value
    fields: dict[str, object] = {
        "id": cid,
        "org_id": ORG,
        "name": cid,
        "scope": "org",
        "target": None,
        "application": application,
        "binding": binding,
        "policy": Policy(),
        "version": 1,
        "fingerprint": "f",
        "expires_at": None,
        "revoked_at": None,
        "created_at": now,
        "updated_at": now,
    } | kw
    return Credential(**fields)  # type: ignore[arg-type]


def status(result: Result) -> int:
    return int(result.stdout.split(" ", 2)[1])


def value() -> str:
    return f"real-{secrets.token_hex(16)}"


async def test_header_template_reaches_upstream_and_the_guest_sees_the_placeholder(
    w: World,
) -> None:
    world = w
    real = value()
    cred = credential(world, HeaderApply(), Binding(hosts=[API], path_prefixes=["/v1/"]), real)
    view = world.give(cred)
    ph = view.entries[0].placeholder
    result = await world.curl(f"https://{API}/v1/me")
    assert status(result) == 200, result
    assert world.api.received[-1][1]["authorization"] == f"Bearer {real}"
    assert real not in result.stdout and f"Bearer {ph}" in result.stdout
    assert f"x-echo-authorization: Bearer {ph}" in result.stdout
    outside = await world.curl(f"https://{API}/v2/me")  # outside the path prefix
    assert status(outside) == 200 and "authorization" not in world.api.received[-1][1]
    assert world.audit(cred.id) == ["allow"]
    assert verify(world.gateway.credential_audit.records) is None


async def test_basic_and_placeholder_substitution_in_the_bound_header(w: World) -> None:
    world = w
    basic_value, key_value = value(), value()
    basic = credential(world, BasicApply(user="bot"), Binding(hosts=[API]), basic_value)
    key = credential(world, PlaceholderApply(header="X-Api-Key"), Binding(hosts=[API]), key_value)
    view = world.give(basic, key)
    ph = {e.credential_id: e.placeholder for e in view.entries}
    result = await world.curl("-H", f"X-Api-Key: k={ph[key.id]}", f"https://{API}/any")
    assert status(result) == 200, result
    headers = world.api.received[-1][1]
    assert headers["x-api-key"] == f"k={key_value}"
    assert headers["authorization"].startswith("Basic ")
    assert key_value not in result.stdout and basic_value not in result.stdout
    assert f"k={ph[key.id]}" in result.stdout
    assert headers["authorization"].split()[1] not in result.stdout
    assert f"Basic {ph[basic.id]}" in result.stdout
    assert world.audit(key.id) == ["allow"] and world.audit(basic.id) == ["allow"]
    unused = await world.curl(f"https://{API}/any")  # no placeholder sent: no key added
    assert status(unused) == 200 and "x-api-key" not in world.api.received[-1][1]
    assert world.audit(key.id) == ["allow"] and world.audit(basic.id) == ["allow"] * 2


async def test_placeholder_misuse_is_refused_audited_and_the_secret_never_leaves(w: World) -> None:
    world = w
    real = value()
    cred = credential(
        world,
        PlaceholderApply(header="X-Api-Key"),
        Binding(hosts=[API], methods=["GET", "POST"]),
        real,
    )
    view = world.give(cred)
    ph = view.entries[0].placeholder
    foreign = placeholder(SECRET, "another-sandbox", cred.id)
    cases = {
        "unbound host": ("-H", f"X-Api-Key: {ph}", f"https://{OTHER}/x"),
        "other header": ("-H", f"X-Other: {ph}", f"https://{API}/x"),
        "query": (f"https://{API}/x?key={ph}",),
        "body": ("-H", f"X-Api-Key: {ph}", "--data", f"a={ph}", f"https://{API}/x"),
        "plain http": ("-H", f"X-Api-Key: {ph}", f"http://{API}/x"),
        "other sandbox": ("-H", f"X-Api-Key: {foreign}", f"https://{API}/x"),
        "method": ("-X", "DELETE", "-H", f"X-Api-Key: {ph}", f"https://{API}/x"),
    }
    before = len(world.api.received)
    for name, args in cases.items():
        result = await world.curl(*args)
        assert status(result) == 403, (name, result)
    assert not world.api.saw(real)
    assert len(world.api.received) == before, world.api.received[before:]
    decisions = [r.decision for r in world.gateway.credential_audit.records[-len(cases) :]]
    assert all(d.startswith("deny: ") for d in decisions), decisions
    assert len(set(decisions)) >= 5, decisions
    records = list(world.gateway.credential_audit.records)
    assert verify(records) is None
    assert not any(real in json.dumps(r.to_json()) or "?" in (r.path or "") for r in records)
    forged = replace(records[-2], decision="allow")
    assert verify([*records[:-2], forged, records[-1]]) == forged.seq


async def test_rotation_and_revocation_take_effect_on_the_next_request(w: World) -> None:
    world = w
    first, second = value(), value()
    cred = credential(
        world, HeaderApply(header="X-Token", template="{value}"), Binding(hosts=[API]), first
    )
    view = world.give(cred)
    assert status(await world.curl(f"https://{API}/r")) == 200
    assert world.api.received[-1][1]["x-token"] == first
    world.values[(cred.id, 2)] = second
    rotated = world.give(replace(cred, version=2))
    assert rotated.version == view.version + 1
    assert world.gateway.credentials_version(world.guest.sandbox_id) == rotated.version
    assert world.gateway.credentials_version("no-such-sandbox") is None
    assert status(await world.curl(f"https://{API}/r")) == 200
    assert world.api.received[-1][1]["x-token"] == second
    revoked = world.give(replace(cred, version=2, revoked_at=datetime.now(UTC)))
    assert revoked.entries == ()
    before = len(world.api.received)
    refused = await world.curl("-H", f"X-Token: {view.entries[0].placeholder}", f"https://{API}/r")
    assert status(refused) == 403
    last = world.gateway.credential_audit.records[-1]
    assert last.decision == "deny: placeholder not issued to this sandbox, or revoked"
    unsent = await world.curl(f"https://{API}/r")
    assert status(unsent) == 200 and "x-token" not in world.api.received[-1][1]
    assert len(world.api.received) == before + 1


async def test_expired_credential_is_refused(w: World) -> None:
    world = w
    soon = datetime.now(UTC) + timedelta(seconds=1)
    cred = credential(world, HeaderApply(), Binding(hosts=[API]), value(), expires_at=soon)
    world.give(cred)
    gate = world.gateway.gate(world.guest.sandbox_id)
    assert gate.credentials is not None
    gate.credentials._clock = lambda: soon + timedelta(seconds=1)
    try:
        result = await world.curl(f"https://{API}/e")
    finally:
        gate.credentials._clock = lambda: datetime.now(UTC)
    assert status(result) == 403 and "expired" in result.stdout
    assert world.audit(cred.id) == ["deny: credential expired"]


async def test_the_n_plus_first_call_gets_429_with_retry_after(w: World) -> None:
    world = w
    limit = Binding(hosts=[API], rate_limit=RateLimit(rps=0.01, burst=3))
    cred = credential(world, HeaderApply(), limit, value())
    world.give(cred)
    for _ in range(3):
        assert status(await world.curl(f"https://{API}/rl")) == 200
    limited = await world.curl(f"https://{API}/rl")
    assert status(limited) == 429, limited
    assert "retry-after: " in limited.stdout.lower()
    retry = int(limited.stdout.lower().split("retry-after: ")[1].split()[0])
    assert 1 <= retry <= 100
    assert world.audit(cred.id) == ["allow"] * 3 + ["rate_limited"]
