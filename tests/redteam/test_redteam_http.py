"""Red-team cases over HTTP(S): the outcome, and that no canary saw anything."""

from __future__ import annotations

import asyncio
import json
import secrets

import pytest

from tests.redteam import scripts
from tests.redteam.fakenet import ATTACKER_IP, CDN_IP, WEB_IP, FakeInternet
from tests.redteam.guests import Guest, VmGuest

pytestmark = [pytest.mark.redteam, pytest.mark.netns, pytest.mark.asyncio(loop_scope="session")]

ALLOW = {
    "mode": "allowlist",
    "allow": ["allowed.test", "good.cdn.test", "pypi.test", "files.pypi.test"],
}
CURL = ("curl", "-sS", "--max-time", "15")


def hits_for(internet: FakeInternet, host: str) -> list[object]:
    return [h for h in internet.hits if h.host == host or h.sni == host]


async def test_allowed_https_and_http_work_with_stock_curl(
    guest: Guest, internet: FakeInternet
) -> None:
    await guest.set_policy(ALLOW)
    before = internet.canary_hits()
    for args in (
        ("https://allowed.test/a?q=secret",),
        ("--http2", "https://allowed.test/b"),
        ("http://allowed.test/c",),
    ):
        result = await guest.run(*CURL, *args)
        assert result.exit_code == 0, result.stderr
        echo = json.loads(result.stdout)
        assert echo["server"] == WEB_IP and echo["host"] == "allowed.test"
    big = await guest.run(
        *CURL, "-o", "/dev/null", "-w", "%{size_download}", "https://allowed.test/bytes/5000000"
    )
    assert big.stdout == "5000000", big.stderr
    for flag in ("--http1.1", "--http2"):
        post = await guest.run(
            "sh",
            "-c",
            "head -c 3000000 /dev/zero > /tmp/body && curl -sS --max-time 30 "
            f"{flag} --data-binary @/tmp/body https://allowed.test/upload",
        )
        assert json.loads(post.stdout)["body"] == 3000000, post
    records = [r for r in guest.audit() if r.kind == "http" and r.decision == "allow"]
    assert records and all(r.path is not None and "?" not in r.path for r in records)
    assert {r.address for r in records} == {WEB_IP}
    assert internet.canary_hits() == before


async def test_pip_installs_from_the_fake_index(guest: Guest, internet: FakeInternet) -> None:
    if guest.kind != "vm":
        pytest.skip("pip runs in the VM template")
    await guest.set_policy(ALLOW)
    result = await guest.run(
        "pip",
        "install",
        "--break-system-packages",
        "--no-cache-dir",
        "--index-url",
        "https://pypi.test/simple/",
        "spacetoy",
        timeout=180,
    )
    assert result.exit_code == 0, result.stdout + result.stderr
    check = await guest.run("python3", "-c", "import spacetoy; print(spacetoy.VALUE)")
    assert check.stdout.strip() == "42"


async def test_mode_none_leaves_no_network(guest: Guest, internet: FakeInternet) -> None:
    await guest.set_policy(None)
    before = sum(internet.connections.values())
    queries = len(internet.dns.queries)
    resolve = await guest.run(
        "python3", "-c", "import socket; socket.gethostbyname('allowed.test')"
    )
    assert resolve.exit_code != 0
    for url in (
        "https://allowed.test/",
        f"https://{WEB_IP}/",
        f"http://{WEB_IP}/",
        f"http://{ATTACKER_IP}/",
        "http://169.254.169.254/",
    ):
        result = await guest.run(*CURL, "--resolve", f"allowed.test:443:{WEB_IP}", url)
        assert result.exit_code != 0 or "space gateway" in result.stdout, (url, result)
    assert sum(internet.connections.values()) == before
    assert len(internet.dns.queries) == queries


async def test_spoofed_dns_and_hosts_cannot_redirect_an_allowed_name(
    guest: Guest, internet: FakeInternet
) -> None:
    await guest.set_policy(ALLOW)
    before = internet.canary_hits()
    result = await guest.run(
        *CURL, "--resolve", f"allowed.test:443:{ATTACKER_IP}", "https://allowed.test/hosts"
    )
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["server"] == WEB_IP
    hosts = await guest.run(
        "sh",
        "-c",
        f"echo '{ATTACKER_IP} allowed.test' > /tmp/h && "
        f"curl -sS --max-time 15 --resolve allowed.test:80:{ATTACKER_IP} "
        "http://allowed.test/plainhosts",
    )
    assert json.loads(hosts.stdout)["server"] == WEB_IP
    assert internet.canary_hits() == before


async def test_direct_ip_and_missing_sni_are_refused(guest: Guest, internet: FakeInternet) -> None:
    await guest.set_policy({"mode": "open"})
    before = internet.connections[(WEB_IP, 443)] + internet.connections[(WEB_IP, 80)]
    tls_ip = await guest.run(*CURL, "-k", f"https://{WEB_IP}/")
    assert tls_ip.exit_code != 0
    plain_ip = await guest.run(*CURL, "-o", "/dev/null", "-w", "%{http_code}", f"http://{WEB_IP}/")
    assert plain_ip.stdout == "403"
    no_sni = await guest.run(
        "python3",
        "-c",
        (
            "import socket, ssl\n"
            "ctx = ssl.create_default_context(); ctx.check_hostname = False\n"
            "s = socket.create_connection(('10.200.0.1', 443), timeout=5)\n"
            "try:\n    ctx.wrap_socket(s); print('handshake ok')\n"
            "except (ssl.SSLError, OSError) as exc:\n    print('refused', exc)\n"
        ),
    )
    assert "refused" in no_sni.stdout
    assert internet.connections[(WEB_IP, 443)] + internet.connections[(WEB_IP, 80)] == before
    tls_records = [r for r in guest.audit() if r.kind == "tls" and r.decision == "deny"]
    assert any(r.reason == "TLS without SNI" for r in tls_records)


async def test_domain_fronting_on_a_shared_cdn_gets_421(
    guest: Guest, internet: FakeInternet
) -> None:
    await guest.set_policy(ALLOW)
    h1 = await guest.run(
        *CURL,
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "-H",
        "Host: evil.cdn.test",
        "https://good.cdn.test/front",
    )
    assert h1.stdout == "421", h1
    h2 = await guest.run(
        *CURL,
        "--http2",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "-H",
        "Host: evil.cdn.test",
        "https://good.cdn.test/front2",
    )
    assert h2.stdout == "421", h2
    two = await guest.run(
        "python3", "-c", scripts.H2_TWO_AUTHORITIES, "good.cdn.test", "evil.cdn.test"
    )
    assert '"host": "good.cdn.test"' in two.stdout, two
    assert "STREAM3 space gateway: host does not match SNI" in two.stdout, two
    direct = await guest.run(*CURL, "https://evil.cdn.test/")
    assert direct.exit_code != 0
    assert hits_for(internet, "evil.cdn.test") == []
    assert internet.connections[(CDN_IP, 443)] >= 1


async def test_name_tricks_trailing_dot_case_punycode(guest: Guest, internet: FakeInternet) -> None:
    await guest.set_policy(ALLOW)
    ok = await guest.run(*CURL, "https://ALLOWED.test./dot")
    assert ok.exit_code == 0 and json.loads(ok.stdout)["host"] in ("allowed.test", "ALLOWED.test.")
    for url in (
        "https://xn--allowed-6ya.test/",
        "https://allowed.test.evil.cdn.test/",
        "https://allowed.tes/",
    ):
        result = await guest.run(*CURL, "--resolve", f"{url.split('/')[2]}:443:{WEB_IP}", url)
        assert result.exit_code != 0, (url, result)
    assert hits_for(internet, "xn--allowed-6ya.test") == []


@pytest.mark.parametrize(
    ("request_", "status"),
    [
        ("GET / HTTP/1.1\\r\\nHost: allowed.test\\r\\nHost: evil.cdn.test\\r\\n\\r\\n", "400"),
        ("GET http://evil.cdn.test/ HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n", "400"),
        ("CONNECT evil.cdn.test:443 HTTP/1.1\\r\\nHost: evil.cdn.test:443\\r\\n\\r\\n", "405"),
        (
            "GET / HTTP/1.1\\r\\nHost: allowed.test\\r\\nUpgrade: h2c\\r\\n"
            "HTTP2-Settings: AAMAAABkAAQAAP__\\r\\nConnection: Upgrade, HTTP2-Settings\\r\\n\\r\\n",
            "400",
        ),
        (
            "POST / HTTP/1.1\\r\\nHost: allowed.test\\r\\nContent-Length: 4\\r\\n"
            "Transfer-Encoding: chunked\\r\\n\\r\\n0\\r\\n\\r\\nGET /smuggled HTTP/1.1\\r\\n"
            "Host: evil.cdn.test\\r\\n\\r\\n",
            "400",
        ),
    ],
    ids=["duplicate-host", "absolute-form", "connect", "h2c", "cl-te"],
)
async def test_smuggling_shapes_are_refused(
    guest: Guest, internet: FakeInternet, request_: str, status: str
) -> None:
    await guest.set_policy(ALLOW)
    before = len(internet.hits)
    result = await guest.run("python3", "-c", scripts.RAW_TLS, "allowed.test", request_)
    assert result.stdout.split()[1:2] == [status], result
    assert len(internet.hits) == before
    assert hits_for(internet, "evil.cdn.test") == []


async def test_internal_targets_are_fenced(guest: Guest, internet: FakeInternet) -> None:
    await guest.set_policy({"mode": "open"})
    before = internet.canary_hits()
    names = {}
    for address in ("169.254.169.254", "127.0.0.1", "10.0.0.5", "100.64.0.9"):
        name = f"n{secrets.token_hex(3)}.test"
        internet.dns.poison(name, address)
        names[name] = address
    for name in names:
        for scheme in ("http", "https"):
            result = await guest.run(
                *CURL,
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                f"{scheme}://{name}/latest/meta-data/",
            )
            assert result.stdout in ("000", "502", "503"), (name, result)
    for url in (
        "http://169.254.169.254/latest/meta-data/",
        "http://127.0.0.1/",
        "http://[::1]/",
        "http://10.0.0.5/",
    ):
        result = await guest.run(*CURL, "-o", "/dev/null", "-w", "%{http_code}", url)
        assert result.stdout in ("000", "400", "403"), (url, result)
    resolve = await guest.run(
        "python3", "-c", f"import socket; print(socket.gethostbyname('{next(iter(names))}'))"
    )
    assert resolve.exit_code != 0
    assert internet.canary_hits() == before


async def test_root_namespace_services_are_out_of_reach(
    guest: Guest, internet: FakeInternet
) -> None:
    await guest.set_policy({"mode": "open"})
    accepted: list[object] = []
    server = await asyncio.start_server(
        lambda r, w: (accepted.append(1), w.close()), "127.0.0.1", 0
    )
    port = server.sockets[0].getsockname()[1]
    try:
        for url in (
            f"http://127.0.0.1:{port}/",
            f"http://10.200.0.1:{port}/",
            "http://127.0.0.1/",
            "http://localhost/",
        ):
            await guest.run(*CURL, "--max-time", "5", url)
        await guest.run(*CURL, "-H", f"Host: 127.0.0.1:{port}", f"http://{WEB_IP}/")
    finally:
        server.close()
        await server.wait_closed()
    assert accepted == []


async def test_redirect_to_a_forbidden_host_is_not_followed_through(
    guest: Guest, internet: FakeInternet
) -> None:
    await guest.set_policy(ALLOW)
    result = await guest.run(
        *CURL, "-L", "https://allowed.test/redirect?to=https://evil.cdn.test/x"
    )
    assert result.exit_code != 0
    result = await guest.run(
        *CURL,
        "-L",
        "--resolve",
        f"evil.cdn.test:443:{CDN_IP}",
        "https://allowed.test/redirect?to=https://evil.cdn.test/y",
    )
    assert result.exit_code != 0
    assert hits_for(internet, "evil.cdn.test") == []


async def test_policy_change_closes_keepalive_and_websocket(
    guest: Guest, internet: FakeInternet
) -> None:
    await guest.set_policy({**ALLOW, "websocket": True})
    seen = len(internet.hits)
    running = asyncio.ensure_future(guest.run("python3", "-c", scripts.WEBSOCKET_HELD, timeout=90))
    try:
        async with asyncio.timeout(60):
            while not any(h.path == "/ws" for h in internet.hits[seen:]):
                await asyncio.sleep(0.2)
        await asyncio.sleep(1.0)
        await guest.set_policy({"mode": "allowlist", "allow": ["good.cdn.test"]})
        result = await running
    finally:
        running.cancel()
    assert "HEAD HTTP/1.1 101" in result.stdout, result
    assert "ECHO ping" in result.stdout
    closed = [line for line in result.stdout.splitlines() if line.startswith("CLOSED")]
    assert closed and float(closed[0].split()[-1]) < 20, result
    after = await guest.run(*CURL, "https://allowed.test/after")
    assert after.exit_code != 0


async def test_policy_change_applies_to_a_kept_alive_connection(
    guest: Guest, internet: FakeInternet
) -> None:
    await guest.set_policy(ALLOW)
    seen = len(internet.hits)
    running = asyncio.ensure_future(guest.run("python3", "-c", scripts.KEEPALIVE_HELD))
    try:
        async with asyncio.timeout(60):
            while not any(h.path == "/keepalive-1" for h in internet.hits[seen:]):
                await asyncio.sleep(0.2)
        await guest.set_policy({"mode": "allowlist", "allow": ["good.cdn.test"]})
        result = await running
    finally:
        running.cancel()
    assert "FIRST HTTP/1.1 200" in result.stdout, result
    assert "SECOND CLOSED" in result.stdout or "SECOND HTTP/1.1 403" in result.stdout, result
    assert not any(h.path == "/keepalive-2" for h in internet.hits[seen:])


async def test_session_resumption_cannot_switch_sni(guest: Guest, internet: FakeInternet) -> None:
    await guest.set_policy(ALLOW)
    result = await guest.run("python3", "-c", scripts.RESUME)
    assert "FIRST HTTP/1.1 200" in result.stdout, result
    # OpenSSL clients resend the session's SNI when resuming, so the gateway either
    # refuses the handshake or binds the connection to the first name: 421 for the other.
    assert "SECOND refused" in result.stdout or "SECOND HTTP/1.1 421" in result.stdout, result
    assert hits_for(internet, "evil.cdn.test") == []


@pytest.mark.vm
async def test_policy_and_ca_survive_suspend_and_restore(vm_guest: Guest) -> None:
    """The restored VM sits in a new namespace: same policy, a CA it still trusts."""
    assert isinstance(vm_guest, VmGuest)
    await vm_guest.set_policy(ALLOW)
    await vm_guest.node.suspend_sandbox(vm_guest.sandbox_id)
    await vm_guest.node.restore_sandbox(vm_guest.sandbox_id)
    result = await vm_guest.run(*CURL, "https://allowed.test/after-restore")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["host"] == "allowed.test"
    denied = await vm_guest.run(*CURL, "https://forbidden.test/")
    assert denied.exit_code != 0
