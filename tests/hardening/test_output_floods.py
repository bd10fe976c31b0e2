"""Output floods from inside a guest leave `space up` bounded (issue 9, must-show 2).

One `space up` (real VMs) with an attacker and a victim sandbox. Each case floods
for at most FLOOD_SECONDS — 2 GB is asked for; under TCG the guest cannot push
that in time, so each case prints the bytes it did push — and checks, while the
flood runs and after: the node process's RSS and open fds stay within their
bounds, the on-disk logs within their caps, and the victim's exec p50 within
2x of its value before the flood (quiet, and next to an attacker that only
spins its vCPU: see `report`; all printed).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.server import SpaceServer

pytestmark = [
    pytest.mark.hardening,
    pytest.mark.vm,
    pytest.mark.netns,
    pytest.mark.serial,  # p50s against a baseline: nothing else may run beside it
    pytest.mark.timeout(900),
]

MIB = 1 << 20
FLOOD_SECONDS = 40.0
HOSTILE_SECONDS = 120.0  # the hostile agent's take-over needs a slow Python start first
TWO_GB = 2_000_000_000
COMMAND_LOG_CAP = 64 * MIB  # the defaults, as an operator gets them
EXEC_CAP = 16 * MIB
CONSOLE_CAP = 256 << 10  # below the 4 MiB default: TCG's serial port pushes ~0.03 MiB/s
RSS_BOUND = 256 * MIB  # growth of the node process over its quiet RSS
NODE_CPU_SHARE = 0.5  # of one core, at most, for the node process during a flood
FD_BOUND = 64  # growth of its open fds
P50_RUNS = 15


@dataclass
class Node:
    server: SpaceServer
    http: httpx.Client
    attacker: str
    victim: str
    rss: int
    fds: int

    @property
    def pid(self) -> int:
        proc = self.server._proc  # the `space up` process: API, controller and node
        assert proc is not None
        return proc.pid


def rss_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise KeyError("VmRSS")


def fds_of(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def exec_p50(http: httpx.Client, sandbox: str) -> float:
    times = []
    for _ in range(P50_RUNS):
        began = time.monotonic()
        response = http.post(f"/v1/sandboxes/{sandbox}/exec", json={"cmd": "true"})
        assert response.status_code == 200, response.text
        times.append(time.monotonic() - began)
    return statistics.median(times)


def cpu_of(pid: int) -> float:
    """User + system CPU seconds of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Peak:
    """RSS and fd peaks of a process, sampled in a thread while a flood runs, and
    the CPU seconds it used meanwhile."""

    pid: int
    rss: int = 0
    fds: int = 0
    cpu: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> Peak:
        self._cpu = cpu_of(self.pid)
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.cpu = cpu_of(self.pid) - self._cpu

    def _sample(self) -> None:
        while not self._stop.wait(0.1):
            self.rss, self.fds = max(self.rss, rss_of(self.pid)), max(self.fds, fds_of(self.pid))


@pytest.fixture(scope="module")
def node() -> Iterator[Node]:
    server = SpaceServer(
        Path(tempfile.mkdtemp(prefix="space-hf-")),
        SPACE_NODE_WARM_POOL="{}",
        SPACE_LIMITS_CONSOLE_LOG_BYTES=str(CONSOLE_CAP),
    )
    try:
        server.start()
        with server.client() as http:
            attacker, victim = server.create(http), server.create(http)
            exec_p50(http, victim)  # warm up
            proc = server._proc
            assert proc is not None
            yield Node(server, http, attacker, victim, rss_of(proc.pid), fds_of(proc.pid))
    finally:
        leaks = server.close()
    assert not leaks, leaks


def busy_neighbour_p50(http: httpx.Client, attacker: str, victim: str) -> float:
    """The victim's exec p50 while the attacker's guest spins its vCPU and writes
    nothing: the floor for any busy neighbour until per-VM CPU limits exist."""
    url = f"/v1/sandboxes/{attacker}/commands"
    spin = http.post(url, json={"cmd": "timeout 60 sh -c 'while :; do :; done'"})
    assert spin.status_code == 201, spin.text
    try:
        time.sleep(2)  # let the loop get going before measuring under it
        return exec_p50(http, victim)
    finally:
        http.post(f"{url}/{spin.json()['id']}/signal", json={"signal": "KILL"})


@dataclass
class Measured:
    """The victim's exec p50 just before a flood, with the attacker idle (`quiet`)
    and with it only spinning its vCPU (`busy`), and under the flood; the node's
    peaks meanwhile."""

    value: Any
    quiet: float
    busy: float
    during: float
    peak: Peak
    seconds: float  # how long the flood ran


def under_flood(node: Node, flood: Callable[[], Any]) -> Measured:
    """Measure the victim's quiet and busy-neighbour p50, then run `flood` in a
    thread and measure it again meanwhile."""
    quiet = exec_p50(node.http, node.victim)
    busy = busy_neighbour_p50(node.http, node.attacker, node.victim)
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = flood()
        except BaseException as exc:
            outcome["error"] = exc

    with Peak(node.pid) as peak:
        thread = threading.Thread(target=run, daemon=True)
        began = time.monotonic()
        thread.start()
        time.sleep(3)  # let the flood get going before measuring under it
        during = exec_p50(node.http, node.victim)
        thread.join(timeout=HOSTILE_SECONDS + 60)
        assert not thread.is_alive(), "the flood did not end in time"
        seconds = time.monotonic() - began
    if "error" in outcome:
        raise outcome["error"]
    return Measured(outcome["value"], quiet, busy, during, peak, seconds)


def report(node: Node, name: str, pushed: int, m: Measured) -> None:
    """Print the figures and check the bounds.

    The victim's p50 under the flood must stay within 2x of its value next to an
    attacker that only spins its vCPU, or of its quiet value if that is higher:
    under TCG a guest's vCPU is a host thread, and with two shared cores any busy
    neighbour slows the victim until per-VM CPU limits exist; what the flood adds
    on top of that is the node's doing.
    """
    peak, seconds = m.peak, m.seconds
    print(  # noqa: T201 (the figures the issue asks to see)
        f"\n{name}: pushed {pushed / MIB:.2f} MiB in {seconds:.0f}s "
        f"({pushed / MIB / max(seconds, 0.1):.2f} MiB/s) of {TWO_GB / MIB:.0f} MiB asked; "
        f"victim exec p50 quiet {m.quiet * 1000:.0f} ms, next to a spinning attacker "
        f"{m.busy * 1000:.0f} ms, during {m.during * 1000:.0f} ms "
        f"({m.during / m.quiet:.1f}x quiet); "
        f"node RSS {node.rss / MIB:.0f} -> peak {peak.rss / MIB:.0f} MiB "
        f"(bound +{RSS_BOUND / MIB:.0f}), fds {node.fds} -> peak {peak.fds} (bound +{FD_BOUND}); "
        f"node CPU {peak.cpu:.1f}s"
    )
    assert peak.rss - node.rss <= RSS_BOUND
    assert peak.fds - node.fds <= FD_BOUND
    assert peak.cpu <= NODE_CPU_SHARE * seconds, (peak.cpu, seconds)
    assert m.during <= 2 * max(m.quiet, m.busy), (m.during, m.quiet, m.busy)
    echo = node.http.post(f"/v1/sandboxes/{node.victim}/exec", json={"cmd": "echo ok"})
    assert echo.json()["stdout"] == "ok\n"


def test_stdout_flood_of_a_command(node: Node) -> None:
    http, sandbox = node.http, node.attacker
    commands = f"/v1/sandboxes/{sandbox}/commands"

    def flood() -> tuple[str, dict[str, Any]]:
        created = http.post(commands, json={"cmd": f"head -c {TWO_GB} /dev/zero"})
        assert created.status_code == 201, created.text
        cid = created.json()["id"]
        log = node.server.data_dir / "command-logs" / sandbox / f"{cid}.jsonl"
        deadline = time.monotonic() + FLOOD_SECONDS
        while (exit_record := _exit_of(log)) is None:
            assert log.stat().st_size <= COMMAND_LOG_CAP
            if time.monotonic() > deadline:
                http.post(f"{commands}/{cid}/signal", json={"signal": "KILL"})
                deadline = float("inf")
            time.sleep(0.5)
        return cid, exit_record

    m = under_flood(node, flood)
    cid, exit_record = m.value
    log = node.server.data_dir / "command-logs" / sandbox / f"{cid}.jsonl"
    assert log.stat().st_size <= COMMAND_LOG_CAP
    kept = sum(len(base64.b64decode(r["data"]["data"])) for r in _records(log)[:-1])
    dropped = exit_record["data"]["dropped_bytes"]
    # The client sees the mark too: the exit event, replayed after the last output.
    replay = {"Last-Event-ID": str(exit_record["id"] - 1)}
    with http.stream("GET", f"{commands}/{cid}/events", headers=replay) as stream:
        body = "".join(stream.iter_text())
    assert f'"dropped_bytes":{dropped}' in body
    report(node, "command stdout flood", kept + dropped, m)
    assert kept > COMMAND_LOG_CAP // 2 and dropped > 0


def test_stdout_flood_of_an_exec(node: Node) -> None:
    def flood() -> dict[str, Any]:
        body = {"cmd": f"yes | head -c {TWO_GB}", "timeout": FLOOD_SECONDS}
        response = node.http.post(f"/v1/sandboxes/{node.attacker}/exec", json=body)
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result

    m = under_flood(node, flood)
    kept, dropped = len(m.value["stdout"]), m.value["stdout_dropped"]
    assert kept == EXEC_CAP and dropped > 0
    report(node, "exec stdout flood", kept + dropped, m)


#: Runs in the attacker's guest: writes to the serial console for argv[1] seconds,
#: then prints how many bytes the port took.
CONSOLE_FLOOD = """
import os, sys, time
fd = os.open("/dev/ttyS0", os.O_WRONLY | os.O_NOCTTY)
line, sent, end = b"console-flood-line\\n" * 3000, 0, time.time() + float(sys.argv[1])
while time.time() < end:
    sent += os.write(fd, line)
print(sent)
"""


def test_serial_console_flood(node: Node) -> None:
    http, files = node.http, f"/v1/sandboxes/{node.attacker}/files"
    assert http.put(files, params={"path": "/tmp/console.py"}, content=CONSOLE_FLOOD).is_success

    def flood() -> int:
        body = {"args": ["python3", "/tmp/console.py", str(FLOOD_SECONDS)]}
        response = http.post(f"/v1/sandboxes/{node.attacker}/exec", json=body)
        assert response.status_code == 200, response.text
        assert response.json()["exit_code"] == 0, response.json()
        return int(response.json()["stdout"])

    m = under_flood(node, flood)
    logs = list(node.server.run_dir.glob("*/console.log"))
    assert len(logs) == 2  # attacker and victim
    for console in logs:
        older = console.with_name("console.log.1")
        on_disk = console.stat().st_size + (older.stat().st_size if older.exists() else 0)
        assert on_disk <= CONSOLE_CAP, (console, on_disk)
    flooded = [c for c in logs if b"console-flood-line" in c.read_bytes()]
    assert len(flooded) == 1  # only the attacker's, and it was rotated: newest output kept
    assert flooded[0].read_bytes().startswith(b"[space: console log rotated; ")
    report(node, "serial console flood", m.value, m)
    assert m.value > CONSOLE_CAP


def _records(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_bytes().splitlines()]


def _exit_of(log: Path) -> dict[str, Any] | None:
    with log.open("rb") as file:
        file.seek(max(0, log.stat().st_size - 4096))
        lines = file.read().splitlines()
    if not lines or not lines[-1].startswith(b'{"id"') or b'"event": "exit"' not in lines[-1]:
        return None  # an exit record is small: whole within the tail, if it is there
    record: dict[str, Any] = json.loads(lines[-1])
    return record


#: Runs in the attacker's guest: kills the agent, takes its virtio port, then
#: answers the host like an agent would (handshake, pings) until asked for a
#: file, which it "sends" by flooding DATA frames without ever waiting for credit;
#: once the host stops reading for 2 s it exits. It first binds a stub over the
#: agent's launcher, so the guest's init does not keep restarting the real agent
#: (a CPU loop in the attacker's own VM, which is the cgroup limits' business).
HOSTILE_AGENT = r"""
import os, subprocess, sys, time
sys.path.insert(0, "/run/space/py")
from space.guest.protocol import MAX_PAYLOAD, FrameDecoder, FrameType, encode, encode_json
from space.guest.link import find_port

end = time.time() + float(sys.argv[1])
port, me = str(find_port()), os.getpid()
console = open("/dev/ttyS0", "w", buffering=1)  # progress, readable in the host's console.log

def say(what):
    console.write(f"hostile agent: {what}\n")

def agents():
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read()
        except OSError:
            continue
        if int(pid) != me and b"space.guest" in cmd:
            yield int(pid)

# Keep the guest's init from restarting the real agent: it runs a stub instead.
open("/tmp/agent-stub", "w").write("#!/bin/sh\nexec sleep 3600\n")
os.chmod("/tmp/agent-stub", 0o755)
subprocess.run(["mount", "--bind", "/tmp/agent-stub", "/run/space/bin/space-agent"], check=True)
while True:
    for pid in agents():
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    try:
        fd = os.open(port, os.O_RDWR | os.O_NONBLOCK)
        break
    except OSError:
        if time.time() > end:
            raise
        time.sleep(0.005)
open("/tmp/hostile.ready", "w").write("on the port\n")
say("on the port")

def send(frame):
    view, stuck = memoryview(frame), time.time() + 2
    while view and time.time() < end:
        try:
            view = view[os.write(fd, view):]
            stuck = time.time() + 2
        except BlockingIOError:
            if time.time() > stuck:
                say("the host stopped reading: cut off")
                sys.exit(0)  # give the port back
            time.sleep(0.01)

decoder = FrameDecoder()
want = frozenset({FrameType.HELLO, FrameType.PING, FrameType.REQUEST})
flood = bytes(MAX_PAYLOAD)
while time.time() < end:
    try:
        data = os.read(fd, 1 << 16)
    except BlockingIOError:
        data = b""
    if not data:
        time.sleep(0.01)
        continue
    decoder.feed(data)
    while (frame := decoder.scan(want)) is not None:
        if frame.type is FrameType.PING:
            send(encode(FrameType.PONG, 0))
        elif frame.type is FrameType.HELLO:
            ack = {"nonce": frame.json()["nonce"], "generation": 1, "agent": {"generations": [1]}}
            send(encode_json(FrameType.HELLO_ACK, 0, ack))
        elif frame.json().get("op") == "read_file":
            say("asked for a file: flooding")
            while time.time() < end:
                send(encode(FrameType.DATA, frame.channel, flood))
        else:
            say(f"asked for {frame.json().get('op')}")
            error = {"error": {"code": "busy", "message": "hostile agent"}}
            send(encode_json(FrameType.REPLY, frame.channel, error))
"""


def test_a_guest_agent_ignoring_credit_is_cut_off(node: Node) -> None:
    """Last in this module: it leaves the attacker's agent cut off."""
    http, files = node.http, f"/v1/sandboxes/{node.attacker}/files"
    assert http.put(files, params={"path": "/tmp/hostile.py"}, content=HOSTILE_AGENT).is_success

    def flood() -> str:
        argv = ["/run/space/bin/python3", "/tmp/hostile.py", str(HOSTILE_SECONDS)]
        started = http.post(f"/v1/sandboxes/{node.attacker}/commands", json={"args": argv})
        assert started.status_code == 201, started.text
        deadline = time.monotonic() + HOSTILE_SECONDS
        with held_download(node, "/tmp/hostile.ready", deadline):
            while time.monotonic() < deadline:
                cut = http.post(f"/v1/sandboxes/{node.attacker}/exec", json={"cmd": "true"})
                if cut.status_code == 502:
                    return str(cut.json()["error"]["message"])
                time.sleep(0.5)
        raise AssertionError("the hostile agent was never cut off")

    m = under_flood(node, flood)
    message = m.value
    assert "cut off" in message and "without credit" in message, message
    # Only the attacker: its calls keep failing with that error, the victim's work.
    again = http.post(f"/v1/sandboxes/{node.attacker}/exec", json={"cmd": "true"})
    assert again.status_code == 502 and "cut off" in again.json()["error"]["message"]
    held = int(re.search(r"sent (\d+) stream bytes", message).group(1))  # type: ignore[union-attr]
    print(f"\ncut off: {message}")  # noqa: T201 (the figures the issue asks to see)
    report(node, "credit-ignoring agent (bytes held unread)", held, m)


@contextlib.contextmanager
def held_download(node: Node, path: str, deadline: float) -> Iterator[None]:
    """GET a file until it answers 200 (the hostile agent is on the port and
    floods), then hold the response unread on a socket with a tiny receive buffer,
    so the node cannot pass on what the guest pushes and must not buffer it."""
    target = f"/v1/sandboxes/{node.attacker}/files?path={path}"
    request = (
        f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {node.server.key}\r\n\r\n"
    ).encode()
    while time.monotonic() < deadline:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(60)
        sock.connect(("127.0.0.1", node.server.port))
        sock.sendall(request)
        status = sock.recv(64)
        if status.startswith(b"HTTP/1.1 200"):
            try:
                yield
            finally:
                sock.close()
            return
        sock.close()
        time.sleep(0.2)  # still the real agent (404), or the port changing hands
    consoles = [c.read_bytes()[-2000:] for c in node.server.run_dir.glob("*/console.log")]
    raise AssertionError(f"the hostile agent never answered; consoles end with {consoles}")
