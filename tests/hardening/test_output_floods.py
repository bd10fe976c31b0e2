"""Output floods from inside a guest leave `space up` bounded (issue 9, must-show 2).

One `space up` (real VMs) with an attacker and a victim sandbox. Each case floods
for at most FLOOD_SECONDS — 2 GB is asked for; under TCG the guest cannot push
that in time, so each case prints the bytes it did push — and checks, while the
flood runs and after: the node process's RSS and open fds stay within their
bounds, the on-disk logs within their caps, and the victim's exec p50 within
2x of its quiet value (both printed).
"""

from __future__ import annotations

import base64
import json
import os
import re
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

pytestmark = [pytest.mark.hardening, pytest.mark.vm, pytest.mark.netns, pytest.mark.timeout(900)]

MIB = 1 << 20
FLOOD_SECONDS = 40.0
TWO_GB = 2_000_000_000
COMMAND_LOG_CAP = 64 * MIB  # the defaults, as an operator gets them
EXEC_CAP = 16 * MIB
CONSOLE_CAP = 1 * MIB  # below the 4 MiB default: TCG's serial port pushes ~0.1 MiB/s
RSS_BOUND = 256 * MIB  # growth of the node process over its quiet RSS
FD_BOUND = 64  # growth of its open fds
P50_RUNS = 15


@dataclass
class Node:
    server: SpaceServer
    http: httpx.Client
    attacker: str
    victim: str
    quiet_p50: float
    busy_p50: float  # while the attacker only burns its vCPU (no output at all)
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
            quiet = exec_p50(http, victim)
            busy = busy_neighbour_p50(http, attacker, victim)
            proc = server._proc
            assert proc is not None
            yield Node(
                server, http, attacker, victim, quiet, busy, rss_of(proc.pid), fds_of(proc.pid)
            )
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


def under_flood(node: Node, flood: Callable[[], Any]) -> tuple[Any, float, Peak]:
    """Run `flood` in a thread; meanwhile the victim's exec p50 and the node's peaks."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = flood()
        except BaseException as exc:
            outcome["error"] = exc

    with Peak(node.pid) as peak:
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        time.sleep(3)  # let the flood get going before measuring under it
        during = exec_p50(node.http, node.victim)
        thread.join(timeout=FLOOD_SECONDS + 120)
        assert not thread.is_alive(), "the flood did not end in time"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"], during, peak


def report(
    node: Node,
    name: str,
    pushed: int,
    seconds: float,
    during: float,
    peak: Peak,
    *,
    baseline: str = "quiet",
) -> None:
    """Print the figures and check the bounds; `baseline="busy"` compares the
    victim's p50 with its value next to a CPU-bound attacker instead of a quiet one."""
    print(  # noqa: T201 (the figures the issue asks to see)
        f"\n{name}: pushed {pushed / MIB:.0f} MiB in {seconds:.0f}s "
        f"({pushed / MIB / max(seconds, 0.1):.1f} MiB/s) of {TWO_GB / MIB:.0f} MiB asked; "
        f"victim exec p50 quiet {node.quiet_p50 * 1000:.0f} ms, next to a CPU-bound attacker "
        f"{node.busy_p50 * 1000:.0f} ms, during {during * 1000:.0f} ms; "
        f"node RSS {node.rss / MIB:.0f} -> peak {peak.rss / MIB:.0f} MiB "
        f"(bound +{RSS_BOUND / MIB:.0f}), fds {node.fds} -> peak {peak.fds} (bound +{FD_BOUND}); "
        f"node CPU {peak.cpu:.1f}s"
    )
    assert peak.rss - node.rss <= RSS_BOUND
    assert peak.fds - node.fds <= FD_BOUND
    floor = node.quiet_p50 if baseline == "quiet" else node.busy_p50
    assert during <= 2 * floor, (during, baseline, floor)
    assert (
        node.http.post(f"/v1/sandboxes/{node.victim}/exec", json={"cmd": "echo ok"}).json()[
            "stdout"
        ]
        == "ok\n"
    )


def test_stdout_flood_of_a_command(node: Node) -> None:
    http, sandbox = node.http, node.attacker
    created = http.post(
        f"/v1/sandboxes/{sandbox}/commands", json={"cmd": f"head -c {TWO_GB} /dev/zero"}
    )
    assert created.status_code == 201, created.text
    log = node.server.data_dir / "commands" / sandbox / f"{created.json()['id']}.jsonl"
    url = f"/v1/sandboxes/{sandbox}/commands/{created.json()['id']}"
    began = time.monotonic()

    def flood() -> dict[str, Any]:
        deadline = began + FLOOD_SECONDS
        while (exit_record := _exit_of(log)) is None:
            assert log.stat().st_size <= COMMAND_LOG_CAP
            if time.monotonic() > deadline:
                http.post(f"{url}/signal", json={"signal": "KILL"})
                deadline = float("inf")
            time.sleep(0.5)
        return exit_record

    exit_record, during, peak = under_flood(node, flood)
    seconds = time.monotonic() - began
    assert log.stat().st_size <= COMMAND_LOG_CAP
    kept = sum(len(base64.b64decode(r["data"]["data"])) for r in _records(log)[:-1])
    dropped = exit_record["data"]["dropped_bytes"]
    # The client sees the mark too: the exit event, replayed after the last output.
    with http.stream(
        "GET", f"{url}/events", headers={"Last-Event-ID": str(exit_record["id"] - 1)}
    ) as stream:
        body = "".join(stream.iter_text())
    assert f'"dropped_bytes":{dropped}' in body
    report(node, "command stdout flood", kept + dropped, seconds, during, peak)
    assert kept > COMMAND_LOG_CAP // 2 and dropped > 0


def test_stdout_flood_of_an_exec(node: Node) -> None:
    began = time.monotonic()

    def flood() -> dict[str, Any]:
        body = {"cmd": f"yes | head -c {TWO_GB}", "timeout": FLOOD_SECONDS}
        response = node.http.post(f"/v1/sandboxes/{node.attacker}/exec", json=body)
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result

    result, during, peak = under_flood(node, flood)
    kept = len(result["stdout"])
    assert kept == EXEC_CAP and result["stdout_dropped"] > 0
    report(
        node,
        "exec stdout flood",
        kept + result["stdout_dropped"],
        time.monotonic() - began,
        during,
        peak,
    )


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
    began = time.monotonic()

    def flood() -> int:
        body = {"args": ["python3", "/tmp/console.py", str(FLOOD_SECONDS)]}
        response = http.post(f"/v1/sandboxes/{node.attacker}/exec", json=body)
        assert response.status_code == 200, response.text
        assert response.json()["exit_code"] == 0, response.json()
        return int(response.json()["stdout"])

    pushed, during, peak = under_flood(node, flood)
    logs = list(node.server.run_dir.glob("*/console.log"))
    assert len(logs) == 2  # attacker and victim
    for console in logs:
        older = console.with_name("console.log.1")
        on_disk = console.stat().st_size + (older.stat().st_size if older.exists() else 0)
        assert on_disk <= CONSOLE_CAP, (console, on_disk)
    flooded = [c for c in logs if b"console-flood-line" in c.read_bytes()]
    assert len(flooded) == 1  # only the attacker's, and it was rotated: newest output kept
    assert flooded[0].read_bytes().startswith(b"[space: console log rotated; ")
    report(node, "serial console flood", pushed, time.monotonic() - began, during, peak)
    assert pushed > CONSOLE_CAP


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

def send(frame):
    view, stuck = memoryview(frame), time.time() + 2
    while view and time.time() < end:
        try:
            view = view[os.write(fd, view):]
            stuck = time.time() + 2
        except BlockingIOError:
            if time.time() > stuck:
                sys.exit("the host stopped reading: cut off")  # give the port back
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
            while time.time() < end:
                send(encode(FrameType.DATA, frame.channel, flood))
        else:
            error = {"error": {"code": "busy", "message": "hostile agent"}}
            send(encode_json(FrameType.REPLY, frame.channel, error))
"""


def test_a_guest_agent_ignoring_credit_is_cut_off(node: Node) -> None:
    """Last in this module: it leaves the attacker's agent dead."""
    http, files = node.http, f"/v1/sandboxes/{node.attacker}/files"
    assert http.put(files, params={"path": "/tmp/hostile.py"}, content=HOSTILE_AGENT).is_success
    argv = ["/run/space/bin/python3", "/tmp/hostile.py", str(FLOOD_SECONDS)]
    started = http.post(f"/v1/sandboxes/{node.attacker}/commands", json={"args": argv})
    assert started.status_code == 201, started.text
    began = time.monotonic()

    def flood() -> str:
        """Ask for a file until the hostile agent answers (it floods), and read none of it."""
        deadline = began + FLOOD_SECONDS
        while time.monotonic() < deadline:
            with http.stream("GET", files, params={"path": "/tmp/hostile.ready"}) as response:
                if response.status_code != 200:
                    time.sleep(0.2)  # still the real agent (404), or the port changing hands
                    continue
                # Hold the body unread: the host must not buffer what the guest pushes.
                end = time.monotonic() + FLOOD_SECONDS
                while time.monotonic() < end:
                    cut = http.post(f"/v1/sandboxes/{node.attacker}/exec", json={"cmd": "true"})
                    if cut.status_code == 502:
                        return str(cut.json()["error"]["message"])
                    time.sleep(0.5)
        raise AssertionError("the hostile agent was never cut off")

    message, during, peak = under_flood(node, flood)
    assert "cut off" in message and "without credit" in message, message
    # Only the attacker: its calls keep failing with that error, the victim's work.
    again = http.post(f"/v1/sandboxes/{node.attacker}/exec", json={"cmd": "true"})
    assert again.status_code == 502 and "cut off" in again.json()["error"]["message"]
    pushed = int(re.search(r"sent (\d+) stream bytes", message).group(1))  # type: ignore[union-attr]
    print(f"\ncut off: {message}")  # noqa: T201 (the figures the issue asks to see)
    # The hostile agent is a Python process in a TCG guest: its vCPU is busy for the
    # whole take-over, so the victim is compared with its p50 next to a busy vCPU.
    seconds = time.monotonic() - began
    report(node, "credit-ignoring agent", pushed, seconds, during, peak, baseline="busy")
