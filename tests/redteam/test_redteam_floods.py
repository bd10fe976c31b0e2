"""Floods from inside a guest: 10,000 TCP connections and 100,000 DNS questions.

Each case checks that the process running the gateway (this test process: the
`LocalNode` runs in-process) keeps its open fds within the per-sandbox fd budget + 64
and its RSS within +64 MiB of what it was before the flood, that
the attacker is refused while it floods and served again once it stops, and that
another sandbox's exec p50 stays within 2x of its quiet value while its DNS and
HTTPS through the gateway keep working.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import Any

import pytest
import pytest_asyncio

from space.gateway.limits import GatewayLimits
from space.node.local import LocalNode
from space.seam.values import SandboxSpec
from tests.redteam.guests import VmGuest
from tests.redteam.vethguest import Result

pytestmark = [
    pytest.mark.redteam,
    pytest.mark.netns,
    pytest.mark.vm,
    pytest.mark.serial,  # p50s against a baseline: nothing else may run beside it
    pytest.mark.asyncio(loop_scope="session"),
]

POLICY = {"mode": "allowlist", "allow": ["allowed.test", "*.allowed.test"]}
CURL = ("curl", "-sS", "--max-time", "20", "-o", "/dev/null", "-w", "%{http_code}")
LIMITS = GatewayLimits()  # what the node under test runs with
FD_SLACK = 64  # the victim's own connections, agent channels, pytest's files
RSS_BOUND = 64 * 1024 * 1024

# Open `count` TCP connections (ports 80 and 443 alternately) as fast as possible
# and hold them; classify each once all connects resolved and again after `hold` s.
TCP_FLOOD = r"""
import json, resource, select, socket, ssl, sys, time
count, hold = int(sys.argv[1]), float(sys.argv[2])
resource.setrlimit(resource.RLIMIT_NOFILE, (count + 512, count + 512))
def probe():
    started = time.monotonic()
    try:
        ctx = ssl.create_default_context()
        raw = socket.create_connection(("198.51.100.10", 443), timeout=5)
        with ctx.wrap_socket(raw, server_hostname="allowed.test") as tls:
            tls.sendall(b"GET / HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n")
            outcome = tls.recv(12).decode(errors="replace") or "empty"
    except Exception as exc:
        outcome = type(exc).__name__
    return [outcome, round(time.monotonic() - started, 2)]
started = time.monotonic()
socks, during = [], None
for i in range(count):
    s = socket.socket()
    s.setblocking(False)
    s.connect_ex(("198.51.100.10", (80, 443)[i % 2]))
    socks.append(s)
    if i == count // 2:
        during = probe()
opened = time.monotonic() - started
poller, pending = select.epoll(), {}
for s in socks:
    pending[s.fileno()] = s
    poller.register(s.fileno(), select.EPOLLOUT | select.EPOLLERR | select.EPOLLHUP)
deadline = time.monotonic() + 60
while pending and time.monotonic() < deadline:
    for fd, _ in poller.poll(1.0):
        poller.unregister(fd)
        pending.pop(fd, None)
resolved = time.monotonic()
def classify():
    seen = {"open": 0, "reset": 0, "closed": 0, "refused": 0, "other": 0}
    for s in socks:
        error = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if error:
            seen["reset" if error == 104 else "refused" if error == 111 else "other"] += 1
            continue
        try:
            data = s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            seen["closed" if data == b"" else "open"] += 1
        except BlockingIOError:
            seen["open"] += 1
        except ConnectionResetError:
            seen["reset"] += 1
        except OSError:
            seen["other"] += 1
    return seen
peak = classify()
time.sleep(max(0.0, hold - (time.monotonic() - resolved)))
print(json.dumps({"opened_s": round(opened, 1), "resolved_s": round(resolved - started, 1),
                  "unresolved": len(pending), "peak": peak, "after_hold": classify(),
                  "probe": during, "seconds": round(time.monotonic() - started, 1)}))
"""

# Send `count` A questions for fresh names under allowed.test, `pace` a second (the
# guest's fastest is ~4,000/s here; pacing keeps its own VMM's CPU out of the victim's
# figures); a thread counts the answers.
DNS_FLOOD = r"""
import json, os, socket, struct, sys, threading, time
count, pace = int(sys.argv[1]), float(sys.argv[2])
suffix = b"\x07allowed\x04test\x00\x00\x01\x00\x01"
tag = os.urandom(3).hex().encode()
def question(i):  # A r<i>-<tag>.allowed.test, a fresh name each time
    return struct.pack("!6HB", i & 0xFFFF, 0x0100, 1, 0, 0, 0, 15) + b"r%07d-%s" % (i, tag) + suffix
flood = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
flood.connect(("198.51.100.53", 53))
answered = [0]
def receive():
    flood.settimeout(3)
    try:
        while True:
            flood.recv(4096)
            answered[0] += 1
    except OSError:
        pass
reader = threading.Thread(target=receive)
reader.start()
started = time.monotonic()
sent = 0
for i in range(count):
    try:
        flood.send(question(i))
        sent += 1
    except OSError:
        pass
    if i % 200 == 199:  # at most `pace` a second: 20x the gateway's rate, and then some
        time.sleep(max(0.0, started + (i + 1) / pace - time.monotonic()))
seconds = time.monotonic() - started
reader.join()
print(json.dumps({"sent": sent, "answered": answered[0], "seconds": round(seconds, 1)}))
"""

LOOKUP = "import socket; print(socket.gethostbyname('allowed.test'))"


def say(line: str) -> None:
    """Figures for the report (shown with `-s`, and with a failure's captured output)."""
    sys.stdout.write(line + "\n")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@dataclass
class Peak:
    fds: int = 0
    rss: int = 0
    samples: int = 0
    started: float = field(default_factory=time.monotonic)
    cpu: float = field(default_factory=time.process_time)

    def cpu_share(self) -> float:
        """This process's CPU time since `started`, as a share of one core."""
        return (time.process_time() - self.cpu) / (time.monotonic() - self.started)

    def sample(self) -> None:
        self.fds = max(self.fds, open_fds())
        self.rss = max(self.rss, rss_bytes())
        self.samples += 1


class VmmCpu:
    """CPU time of a sandbox's VMM process (all threads) as a share of one core."""

    def __init__(self, guest: VmGuest) -> None:
        vm = guest.node.sandbox(guest.sandbox_id).vm
        assert vm is not None
        self._stat = f"/proc/{vm.pid}/stat"
        self._ticks, self._started = self._read(), time.monotonic()

    def _read(self) -> int:
        with open(self._stat) as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])

    def share(self) -> float:
        seconds = (self._read() - self._ticks) / os.sysconf("SC_CLK_TCK")
        return seconds / (time.monotonic() - self._started)


@dataclass
class Victim:
    guest: VmGuest
    exec_times: list[float] = field(default_factory=list)
    fetches: list[Result] = field(default_factory=list)

    async def timed_exec(self) -> float:
        started = time.perf_counter()
        result = await self.guest.run("true")
        assert result.exit_code == 0, result
        return time.perf_counter() - started

    async def quiet(self, n: int = 10) -> list[float]:
        return [await self.timed_exec() for _ in range(n)]

    async def busy_while(self, flood: asyncio.Task[Any]) -> None:
        """Exec and fetch (DNS + HTTPS through the gateway) until the flood is over."""
        rounds = 0
        while not flood.done() and rounds < 400:
            rounds += 1
            self.exec_times.append(await self.timed_exec())
            if rounds % 5 == 1:
                self.fetches.append(await self.guest.run(*CURL, "https://allowed.test/victim"))


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def victim(redteam_node: LocalNode) -> AsyncIterator[Victim]:
    sandbox_id = f"rv{secrets.token_hex(4)}"
    await redteam_node.create_sandbox(SandboxSpec(sandbox_id=sandbox_id, template="base"))
    try:
        guest = VmGuest(redteam_node, sandbox_id)
        await guest.set_policy(POLICY)
        yield Victim(guest)
    finally:
        await redteam_node.destroy_sandbox(sandbox_id)


async def sampled(work: Awaitable[Result], peak: Peak) -> Result:
    async def sample() -> None:
        while True:
            peak.sample()
            await asyncio.sleep(0.2)

    sampler = asyncio.ensure_future(sample())
    try:
        return await work
    finally:
        sampler.cancel()


async def flood_and_measure(
    attacker: VmGuest, victim: Victim, script: str, *args: str
) -> tuple[dict[str, Any], Peak, float, float]:
    await attacker.set_policy(POLICY)
    warm = await victim.guest.run(*CURL, "https://allowed.test/warm")
    assert warm.stdout == "200", warm
    quiet_before = await victim.quiet()
    base = Peak()
    base.sample()
    peak = Peak()
    victim.exec_times.clear()
    victim.fetches.clear()
    vmm = VmmCpu(attacker)
    flood = asyncio.ensure_future(
        sampled(attacker.run("python3", "-c", script, *args, timeout=150), peak)
    )
    await victim.busy_while(flood)
    result = await flood
    cpu, vmm_cpu = peak.cpu_share(), vmm.share()
    assert result.exit_code == 0, result
    report = json.loads(result.stdout)
    busy = statistics.median(victim.exec_times)
    # Quiet samples from before and after the flood: the host's other load drifts.
    quiet = statistics.median(quiet_before + await victim.quiet())
    say(f"\nflood {report}")
    say(
        f"node fds {base.fds} -> peak {peak.fds}; RSS {base.rss >> 20} MiB -> peak "
        f"{peak.rss >> 20} MiB ({peak.samples} samples); node process CPU {cpu:.0%} of a core, "
        f"the attacker's VMM {vmm_cpu:.0%}"
    )
    say(
        f"victim exec p50 quiet {quiet * 1000:.0f} ms (before and after), during the flood "
        f"{busy * 1000:.0f} ms ({len(victim.exec_times)} execs)"
    )
    assert peak.fds - base.fds <= LIMITS.fds_per_sandbox() + FD_SLACK
    assert peak.rss - base.rss <= RSS_BOUND
    assert busy <= 2 * quiet, (busy, quiet)
    failed = [f for f in victim.fetches if f.stdout != "200"]
    assert victim.fetches and not failed, (failed, len(victim.fetches))
    return report, peak, quiet, busy


async def attacker_served_again(attacker: VmGuest, node: LocalNode) -> None:
    gate = node.egress.gateway.gate(attacker.sandbox_id)
    async with asyncio.timeout(30):
        while gate.admission.connections.used > 0:
            await asyncio.sleep(0.1)
    result = await attacker.run(*CURL, "https://allowed.test/after")
    assert result.stdout == "200", result


async def test_ten_thousand_connections_are_capped_and_reaped(
    vm_guest: VmGuest, victim: Victim, redteam_node: LocalNode
) -> None:
    metrics = redteam_node.egress.gateway.metrics
    hold = LIMITS.first_request_timeout + 5
    report, _, _, _ = await flood_and_measure(vm_guest, victim, TCP_FLOOD, "10000", str(hold))
    peak, later = report["peak"], report["after_hold"]
    assert sum(peak.values()) == 10000 and report["unresolved"] == 0, report
    assert peak["open"] <= LIMITS.connections_per_sandbox, report
    assert later["open"] == 0, report  # handshake and first-request deadlines reaped them
    outcome, seconds = report["probe"]
    assert outcome != "HTTP/1.1 200" or seconds > 1.0, report  # refused or slowed meanwhile
    refused = sum(
        metrics.value("space_gateway_refused_connections", listener=listener, reason=reason)
        for listener in ("http", "https")
        for reason in ("rate", "sandbox_limit")
    )
    assert refused >= 10000 - 2 * LIMITS.connections_per_sandbox - LIMITS.accept_burst, refused
    await attacker_served_again(vm_guest, redteam_node)


async def test_a_hundred_thousand_dns_questions_are_rate_limited(
    vm_guest: VmGuest, victim: Victim, redteam_node: LocalNode
) -> None:
    metrics = redteam_node.egress.gateway.metrics
    before = metrics.value("space_gateway_refused_dns_queries", reason="rate")
    report, _, _, _ = await flood_and_measure(vm_guest, victim, DNS_FLOOD, "100000", "2000")
    assert report["sent"] == 100000, report
    allowed = LIMITS.dns_burst + LIMITS.dns_rate * (report["seconds"] + 5)
    assert report["answered"] <= allowed, report
    dropped = metrics.value("space_gateway_refused_dns_queries", reason="rate") - before
    say(f"dropped by the bucket: {dropped:.0f} (the rest were lost before the gateway read them)")
    assert dropped > 0
    lookup = await vm_guest.run("python3", "-c", LOOKUP)
    assert lookup.stdout.strip() == "198.51.100.10", lookup  # served again once it stops
