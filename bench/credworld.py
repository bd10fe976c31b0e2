"""The world `bench.credentials` runs in: an HTTPS upstream in the fake internet
that counts the Authorization it got per host and echoes it (response header and
body, one write), the sandbox's view of two credentials (a `header` one and a
`placeholder` one, each bound to its own host; a third host has none), and the
stdlib client the guest runs (`latency`: one keep-alive connection per host,
interleaved round by round; `rate`: N threads on one host), which answers its
times and every distinct response it read.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import ssl
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import h11
from tests.redteam.fakenet import FakeInternet
from tests.redteam.vethguest import VethGuest

from space.credentials.model import Binding, Credential, HeaderApply, PlaceholderApply, Policy
from space.credentials.scopes import CredentialView, SandboxRef, resolve
from space.gateway.ca import server_context

API_IP = "198.51.100.31"
HOSTS = {"plain": "plain.cred.test", "header": "header.cred.test", "placeholder": "ph.cred.test"}
ORG = "org1"

CLIENT = r"""
import http.client, json, socket, ssl, sys, threading, time
ip, cafile, spec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
ctx = ssl.create_default_context(cafile=cafile)
ctx.set_alpn_protocols(["http/1.1"])
def conn(host):
    class Conn(http.client.HTTPSConnection):
        def connect(self):
            raw = socket.create_connection((ip, 443), timeout=30)
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.sock = ctx.wrap_socket(raw, server_hostname=host)
    return Conn(host, context=ctx, timeout=30)
def once(c, mode, seen, bad):
    headers = {"Authorization": "Bearer " + spec["placeholder"]} if mode == "placeholder" else {}
    start = time.perf_counter()
    c.request("GET", "/v1/echo", headers=headers)
    r = c.getresponse()
    body = r.read()
    took = time.perf_counter() - start
    if r.status != 200:
        bad[mode] = bad.get(mode, 0) + 1
    seen.setdefault(mode, set()).add(repr(r.getheaders()) + "\n" + body.decode("latin-1"))
    return took
seen, bad = {}, {}
if spec["phase"] == "latency":
    conns = {m: conn(h) for m, h in spec["hosts"].items()}
    modes = list(conns)
    times = {m: [] for m in modes}
    for i in range(spec["warm"] + spec["rounds"]):
        k = i % len(modes)
        for m in modes[k:] + modes[:k]:
            took = once(conns[m], m, seen, bad)
            if i >= spec["warm"]:
                times[m].append(took)
    out = {"times": times}
else:
    mode, n = spec["mode"], spec["requests"] // spec["connections"]
    def worker():
        c = conn(spec["hosts"][mode])
        for _ in range(n):
            once(c, mode, seen, bad)
        c.close()
    threads = [threading.Thread(target=worker) for _ in range(spec["connections"])]
    start = time.perf_counter()
    for t in threads: t.start()
    for t in threads: t.join()
    out = {"elapsed": time.perf_counter() - start, "requests": n * spec["connections"]}
out["seen"] = {m: sorted(s) for m, s in seen.items()}
out["bad"] = bad
print(json.dumps(out))
"""


@dataclass
class Upstream:
    """An HTTPS API that counts the Authorization it got per host and echoes it."""

    got: dict[str, Counter[str]] = field(default_factory=dict)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER)
        try:
            while isinstance(event := await _next(conn, reader), h11.Request):
                while not isinstance(await _next(conn, reader), h11.EndOfMessage):
                    pass
                headers = {n.decode(): v.decode() for n, v in event.headers}
                auth = headers.get("authorization", "")
                self.got.setdefault(headers.get("host", ""), Counter())[auth] += 1
                body = json.dumps({"authorization": auth}).encode()
                reply = [
                    ("content-type", "application/json"),
                    ("content-length", str(len(body))),
                    ("x-echo-authorization", auth),
                ]
                head = conn.send(h11.Response(status_code=200, headers=reply)) or b""
                data = conn.send(h11.Data(data=body)) or b""
                writer.write(head + data + (conn.send(h11.EndOfMessage()) or b""))
                await writer.drain()
                conn.start_next_cycle()
        except (OSError, h11.ProtocolError, TimeoutError, ssl.SSLError):
            pass
        finally:
            writer.close()


async def _next(conn: h11.Connection, reader: asyncio.StreamReader) -> object:
    while (event := conn.next_event()) is h11.NEED_DATA:
        conn.receive_data(await asyncio.wait_for(reader.read(65536), 30))
    return event


async def serve_upstream(internet: FakeInternet, upstream: Upstream) -> asyncio.Server:
    subprocess.run(
        ["ip", "-n", internet.netns, "addr", "add", f"{API_IP}/32", "dev", "lo"], check=True
    )
    for host in HOSTS.values():
        internet.dns.poison(host, API_IP)
    context = server_context()
    context.set_alpn_protocols(["http/1.1"])

    def on_sni(sslobj: ssl.SSLObject, name: str | None, _: ssl.SSLContext) -> None:
        sslobj.context = internet.ca.context_for(name or HOSTS["plain"])

    context.sni_callback = on_sni
    sock = await internet._sockets.listener(internet.netns, socket.SOCK_STREAM, (API_IP, 443))
    return await asyncio.start_server(upstream.serve, sock=sock, ssl=context)


def _credential(cid: str, application: HeaderApply | PlaceholderApply, host: str) -> Credential:
    now = datetime.now(UTC)
    return Credential(
        id=cid,
        org_id=ORG,
        name=cid,
        scope="org",
        target=None,
        application=application,
        binding=Binding(hosts=[host]),
        policy=Policy(),
        version=1,
        fingerprint="f",
        expires_at=None,
        revoked_at=None,
        created_at=now,
        updated_at=now,
    )


def view_for(sandbox_id: str) -> CredentialView:
    credentials = [
        _credential("cred_header", HeaderApply(), HOSTS["header"]),
        _credential("cred_placeholder", PlaceholderApply(), HOSTS["placeholder"]),
    ]
    return resolve(
        SandboxRef(sandbox_id, ORG, "proj", "base"),
        credentials,
        [],
        now=datetime.now(UTC),
        placeholder_secret=os.urandom(32),
        previous=None,
    )


async def run_client(guest: VethGuest, cafile: Path, spec: dict[str, Any]) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        *("ip", "netns", "exec", guest.guest_ns, "python3", "-c", CLIENT),
        *(API_IP, str(cafile), json.dumps(spec)),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(120):
            out, err = await proc.communicate()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    if proc.returncode != 0:
        raise RuntimeError(f"bench client failed: {err.decode()[-500:]}")
    result: dict[str, Any] = json.loads(out)
    return result
