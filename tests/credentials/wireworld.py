"""The credentials-on-the-wire world: the real gateway and firewall in front of a
namespace guest (stock curl); upstream, in the red-team fake internet, a fake API
that records what it received and echoes headers and body back in 7-byte chunks,
and on `TOKEN_PATH` (any of its names) a fake OAuth2 token endpoint.

`world` (module scope) and `w` (the world with curl on HTTP/1.1 or HTTP/2) are
the fixtures, made available to the credentials tests by `conftest.py`."""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import secrets
import shutil
import socket
import ssl
import subprocess
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import parse_qs, unquote

import h11
import pytest
import pytest_asyncio

from space.credentials import sigv4
from space.credentials.model import Binding, Credential, CredentialUse, Policy
from space.credentials.scopes import CredentialView, SandboxRef, resolve
from space.gateway import Gateway
from space.gateway.ca import server_context
from space.node.network.egress import Egress
from tests.redteam.fakenet import FakeInternet
from tests.redteam.vethguest import Result, VethGuest

API_IP = "198.51.100.31"
API = "api.cred.test"
OTHER = "other.cred.test"
AUTH = "auth.cred.test"  # a token endpoint's host, outside the guest's policy
TOKEN_PATH = "/oauth/token"
S3 = "s3.cred.test"  # a fake S3 and STS that check SigV4 with the real keys
STS = "sts.cred.test"
POLICY = {"mode": "allowlist", "allow": [API, OTHER, S3, STS]}
ORG = "org1"
SECRET = b"placeholder-secret-for-tests"
CURL = ("curl", "-sS", "--max-time", "15")


@dataclass
class FakeTokens:
    """A token endpoint: checks the client's Basic credentials against `clients`,
    answers `status` (after `delay`) with a fresh token, or `answer` when set."""

    clients: dict[str, str] = field(default_factory=dict)
    status: int = 200
    expires_in: int | None = 3600
    delay: float = 0.0
    answer: bytes | None = None
    #: (headers, form) of each token request
    requests: list[tuple[dict[str, str], dict[str, list[str]]]] = field(default_factory=list)
    issued: list[str] = field(default_factory=list)

    async def reply(self, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
        form = parse_qs(body.decode())
        self.requests.append((headers, form))
        await asyncio.sleep(self.delay)
        if self.answer is not None:
            return self.status, self.answer
        user, _, secret = _basic(headers.get("authorization", "")).partition(":")
        if self.clients.get(user) != secret or form.get("grant_type") != ["client_credentials"]:
            return 401, b'{"error": "invalid_client"}'
        token = f"tok-{secrets.token_hex(20)}"
        self.issued.append(token)
        answer: dict[str, object] = {"access_token": token, "token_type": "Bearer"}
        if self.expires_in is not None:
            answer["expires_in"] = self.expires_in
        return self.status, json.dumps(answer).encode()


def _basic(header: str) -> str:
    scheme, _, blob = header.partition(" ")
    if scheme.lower() != "basic":
        return ""
    user, _, secret = base64.b64decode(blob).decode().partition(":")
    return f"{unquote(user)}:{unquote(secret)}"


@dataclass
class FakeAws:
    """S3 objects (PUT, GET) and STS GetCallerIdentity, behind a SigV4 check with the
    real keys (`keys`: access key id -> secret)."""

    keys: dict[str, str] = field(default_factory=dict)
    objects: dict[str, bytes] = field(default_factory=dict)

    def reply(
        self, method: str, target: bytes, headers: dict[str, str], body: bytes
    ) -> tuple[int, bytes]:
        pairs = [(n.encode(), v.encode()) for n, v in headers.items()]
        try:
            auth = sigv4.parse_authorization(headers["authorization"].encode())
            secret = self.keys[auth.key_id]
            signed = sigv4.Signed(auth, headers["x-amz-date"])
            sigv4.resign(
                signed, method, target, pairs, body, guest_secret=secret, key_id="-", secret="-"
            )
        except (KeyError, sigv4.SigV4Error) as exc:
            return 403, f"<Error><Code>SignatureDoesNotMatch</Code><M>{exc}</M></Error>".encode()
        if auth.service == "sts" and b"Action=GetCallerIdentity" in body:
            arn = f"arn:aws:iam::123456789012:user/{auth.key_id}"
            return (
                200,
                f"<GetCallerIdentityResult><Arn>{arn}</Arn></GetCallerIdentityResult>".encode(),
            )
        if method == "PUT":
            self.objects[target.decode()] = body
            return 200, b""
        found = self.objects.get(target.decode())
        return (200, found) if found is not None else (404, b"<Error>NoSuchKey</Error>")


@dataclass
class FakeApi:
    """Records each request's headers and body; echoes them in 7-byte chunks."""

    received: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)
    tokens: FakeTokens = field(default_factory=FakeTokens)
    aws: FakeAws = field(default_factory=lambda: FakeAws())

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
                if headers.get("authorization", "").startswith("AWS4-HMAC-SHA256 "):
                    self.received.append((event.target.decode(), headers, body))
                    answer = self.aws.reply(event.method.decode(), event.target, headers, body)
                    await self._answer(conn, writer, *answer)
                    conn.start_next_cycle()
                    continue
                if event.target == TOKEN_PATH.encode():
                    await self._answer(conn, writer, *await self.tokens.reply(headers, body))
                    conn.start_next_cycle()
                    continue
                self.received.append((event.target.decode(), headers, body))
                echo = json.dumps(headers).encode() + b"\n" + body
                auth = headers.get("authorization", "").encode()
                reply = [("content-type", "text/plain"), ("x-echo-authorization", auth)]
                if headers.get("upgrade", "").lower() == "websocket":
                    await _switch(conn, writer, reply)
                    return
                echo, coding = _encode(event.target, headers.get("accept-encoding", ""), echo)
                reply += [("content-encoding", coding)] if coding else []
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

    async def _answer(
        self, conn: h11.Connection, writer: asyncio.StreamWriter, status: int, body: bytes
    ) -> None:
        head = [("content-type", "application/json"), ("content-length", str(len(body)))]
        writer.write(conn.send(h11.Response(status_code=status, headers=head)) or b"")
        writer.write(
            (conn.send(h11.Data(data=body)) or b"") + (conn.send(h11.EndOfMessage()) or b"")
        )
        await writer.drain()


def _encode(target: bytes, accepted: str, echo: bytes) -> tuple[bytes, str]:
    """The echo as a compressing server sends it: on `/negotiate/` in the first coding
    of `accepted` it knows (as real servers do), on `/force-<coding>/` whatever the
    request asked (as a broken one does); elsewhere as it is."""
    forced = target.split(b"/")[1].decode() if target.startswith(b"/force-") else ""
    if forced:
        coding = forced.removeprefix("force-")
    elif target.startswith(b"/negotiate/"):
        offered = [c.split(";")[0].strip() for c in accepted.split(",")]
        coding = next((c for c in offered if c in ("gzip", "deflate")), "")
    else:
        return echo, ""
    if coding == "gzip":
        return gzip.compress(echo), coding
    if coding == "deflate":
        return zlib.compress(echo), coding
    return echo[::-1], coding  # a coding the gateway cannot read (its bytes: any)


async def _switch(
    conn: h11.Connection, writer: asyncio.StreamWriter, echo: list[tuple[str, bytes | str]]
) -> None:
    """Accept a WebSocket upgrade, echoing the request's Authorization in the 101."""
    head = [("upgrade", "websocket"), ("connection", "Upgrade"), *echo]
    writer.write(conn.send(h11.InformationalResponse(status_code=101, headers=head)) or b"")
    await writer.drain()


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

    def give(
        self, *credentials: Credential, uses: tuple[CredentialUse, ...] = ()
    ) -> CredentialView:
        """Resolve the guest's view over the one it holds (the next version) and push it;
        `uses`: the sandbox's uses of `rules` credentials (E2B's `network.rules`)."""
        held = self.gateway.gate(self.guest.sandbox_id).credentials
        ref = SandboxRef(self.guest.sandbox_id, ORG, "proj", "base", uses=uses)
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
        servers = await serve_api(internet, api)
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


async def serve_api(internet: FakeInternet, api: FakeApi) -> list[asyncio.Server]:
    """Serve `api` in the fake internet on `API_IP` (HTTPS 443, HTTP 80), the name of
    every fake host of this world resolving there; the caller closes the servers."""
    subprocess.run(
        ["ip", "-n", internet.netns, "addr", "add", f"{API_IP}/32", "dev", "lo"], check=True
    )
    for name in (API, OTHER, AUTH, S3, STS):
        internet.dns.poison(name, API_IP)
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
    world: World, application: object, binding: Binding | None, value: str, **kw: object
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
