"""Credential injection figures: the latency an injected request adds over a plain
one through the same gateway (goal: at most 0.5 ms at p50), and the audit write rate.

    sudo .venv/bin/python -m bench.credentials [--requests 300] [--connections 4]

A namespace guest on a veth (the real firewall and gateway in between) runs one
stdlib client with a keep-alive connection per host, interleaving three kinds of
request round by round (the order rotating) to one fake upstream in the fake
internet: `plain` to a host no credential is bound to, `header` to a host whose
credential the gateway adds as `Authorization: Bearer {value}`, `placeholder` to
a host where the guest sends its placeholder and the gateway substitutes it. The
upstream echoes the Authorization it got (header and body), so every injected
response is scrubbed back. The bench checks that the upstream got the real values
and the guest never saw them, and prints a FAILED line if not. Beside it: the
gateway's own time per injected request as its audit records have it, and
`WireCredentials.plan` + `allowed` timed alone (no sockets), for the decision's
share. The load average is printed: on a busy host every latency includes waits.

The audit: the gateway's credential `AuditChain` lives in memory (the node gives it
no `AuditFile`); `AuditFile.append` (the control plane's copy, and the gateway's if
one is set) opens, appends one JSON line and closes, without fsync. Measured:
requests/s with one audit record per request (in memory, then with an `AuditFile`
attached to the same chain) against plain requests/s, and the writer's own append
rate next to raw writes of the same size on the same disk, with and without fsync.
Every loop is bounded; the benchmark reports and never fails.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.redteam.fakenet import FakeInternet
from tests.redteam.vethguest import VethGuest

from bench.credworld import HOSTS, ORG, Upstream, run_client, serve_upstream, view_for
from bench.gateway import fake_internet_gateway
from bench.stats import emit, percentile, summary, value
from space.credentials.audit import (
    AuditChain,
    AuditEvent,
    AuditFile,
    AuditRecord,
    record_hash,
    verify,
)
from space.credentials.ratelimit import RateLimiter
from space.credentials.scopes import CredentialView
from space.credentials.wire import Plan, Reveal, WireCredentials, WireRequest
from space.gateway import Gateway

MODES = tuple(HOSTS)
GOAL_MS = 0.5
ROUNDS = 3  # of the requests/s runs


@dataclass
class Run:
    gateway: Gateway
    guest: VethGuest
    cafile: Path
    upstream: Upstream
    values: dict[str, str]  # mode -> the real value
    placeholders: dict[str, str]  # mode -> the sandbox's placeholder
    #: what went wrong -> how many times (printed once each)
    failures: Counter[str] = field(default_factory=Counter)

    async def client(self, spec: dict[str, Any]) -> dict[str, Any]:
        spec = {"hosts": HOSTS, "placeholder": self.placeholders["placeholder"]} | spec
        result = await run_client(self.guest, self.cafile, spec)
        self.check_guest(result)
        return result

    def fail(self, what: str) -> None:
        self.failures[what] += 1

    def check_guest(self, result: dict[str, Any]) -> None:
        """Every answer 200; no real value in what the guest read; injected answers
        carry the placeholder where the upstream echoed the value."""
        for mode, count in result["bad"].items():
            self.fail(f"{mode}: {count} answers were not 200")
        for mode, seen in result["seen"].items():
            text = "".join(seen)
            for real in self.values.values():
                if real in text:
                    self.fail(f"{mode}: the guest read a real value")
            if mode in self.placeholders and self.placeholders[mode] not in text:
                self.fail(f"{mode}: the echoed value was not scrubbed to its placeholder")

    def check_upstream(self) -> None:
        """The upstream got each bound host's real value on every request, and never
        on the plain host."""
        for mode, host in HOSTS.items():
            got = self.upstream.got.get(host, Counter())
            if mode == "plain":
                if not got:
                    self.fail("plain: the upstream got no request")
                if any(real in auth for auth in got for real in self.values.values()):
                    self.fail("plain: the upstream got a value it was not bound for")
                continue
            wanted = f"Bearer {self.values[mode]}"
            wrong = sum(n for auth, n in got.items() if auth != wanted)
            if not got or wrong:
                self.fail(
                    f"{mode}: {wrong} of {sum(got.values())} upstream requests lacked the value"
                )

    def seq(self) -> int:
        records = self.gateway.credential_audit.records
        return records[-1].seq if records else 0


async def main(requests: int, connections: int, audits: int) -> None:
    with tempfile.TemporaryDirectory(prefix="space-bench-cred-") as scratch:
        directory = Path(scratch)
        internet = await FakeInternet.start(directory)
        assert internet.ca_file is not None
        gateway = fake_internet_gateway(internet)
        guest = VethGuest()
        upstream = Upstream()
        server: asyncio.Server | None = None
        try:
            server = await serve_upstream(internet, upstream)
            guest.create(gateway)
            policy = {"mode": "allowlist", "allow": list(HOSTS.values())}
            gate = await gateway.register(guest.sandbox_id, guest.netns, policy)
            cafile = directory / "sandbox-ca.pem"
            cafile.write_bytes(gate.ca.certificate_pem)
            view = view_for(guest.sandbox_id)
            values = {"header": f"real-{os.urandom(16).hex()}"}
            values["placeholder"] = f"real-{os.urandom(16).hex()}"
            by_id = {"cred_header": values["header"], "cred_placeholder": values["placeholder"]}

            def reveal(credential_id: str, _version: int) -> str:
                return by_id[credential_id]

            _load("at the start")
            gateway.set_credentials(guest.sandbox_id, ORG, view, reveal)
            placeholders = {
                e.credential_id.removeprefix("cred_"): e.placeholder for e in view.entries
            }
            run = Run(gateway, guest, cafile, upstream, values, placeholders)
            await _latency(run, requests)
            await _rates(run, requests, connections, directory)
            await _decision(gateway, view, reveal, requests)
            run.check_upstream()
            _chain_holds(run)
            for failure, times in run.failures.items():
                emit(f"FAILED: {failure}" + (f" ({times} times)" if times > 1 else ""))
            if not run.failures:
                emit("checked: the upstream got the real values, the guest only placeholders")
            _load("at the end")
        finally:
            if server is not None:
                server.close()
            await gateway.close()
            guest.delete()
            await internet.close()
        _writer(audits, directory)


async def _latency(run: Run, requests: int) -> None:
    before = run.seq()
    result = await run.client({"phase": "latency", "rounds": requests, "warm": 20})
    times: dict[str, list[float]] = result["times"]
    for mode in MODES:
        emit(summary(f"{mode} request latency", times[mode]))
    plain = percentile(times["plain"], 50)
    for mode in ("header", "placeholder"):
        added = (percentile(times[mode], 50) - plain) * 1000
        verdict = "within" if added <= GOAL_MS else "OVER"
        value(f"added latency p50, {mode}", added, "ms", f"{verdict} the {GOAL_MS} ms goal")
        added = (percentile(times[mode], 90) - percentile(times["plain"], 90)) * 1000
        value(f"added latency p90, {mode}", added, "ms")
    records = run.seq() - before
    expected = 2 * (requests + 20)
    if records != expected:
        run.fail(f"{records} credential audit records for {expected} injected requests")
    # the gateway's own part as each record has it: from the plan to the upstream in hand
    held = run.gateway.credential_audit.records[-records:] if records > 0 else []
    own = [r.latency_ms for r in held if r.latency_ms is not None]
    if own:
        emit(summary("injected: plan to upstream (audit)", own, scale=1.0))


async def _rates(run: Run, requests: int, connections: int, directory: Path) -> None:
    """Requests/s with no audit record, with one in memory, and with an AuditFile."""
    path = directory / "audit" / "gateway.jsonl"
    chain = run.gateway.credential_audit
    rates: dict[str, list[float]] = {}
    filed = 0
    for _ in range(ROUNDS):  # alternate the three so drift does not favour one
        for name, mode, file in (
            ("plain", "plain", None),
            ("header, audit in memory", "header", None),
            ("header, audit + AuditFile", "header", AuditFile(path)),
        ):
            chain.file = file
            before = run.seq()
            spec = {"phase": "rate", "mode": mode, "requests": 2 * requests}
            result = await run.client(spec | {"connections": connections})
            chain.file = None
            rates.setdefault(name, []).append(result["requests"] / result["elapsed"])
            records = run.seq() - before
            if mode != "plain" and records != result["requests"]:
                run.fail(f"{name}: {records} audit records for {result['requests']} requests")
            filed += records if file is not None else 0
    note = f"{connections} keep-alive connections, median of {ROUNDS}"
    for name, samples in rates.items():
        per = "" if name == "plain" else ", = audit records/s"
        value(f"{name} requests", statistics.median(samples), "req/s", note + per)
    if not _segments_hold(list(AuditFile(path).records()), filed):
        run.fail("the gateway's AuditFile does not hold its records, hashed and linked")


def _segments_hold(records: list[AuditRecord | None], count: int) -> bool:
    """`count` records, each hashed over its content, each linked to the one before
    where their seqs follow (the file was attached to the chain once per round)."""
    prev: AuditRecord | None = None
    for record in records:
        if record is None or record_hash(record) != record.hash:
            return False
        if prev is not None and record.seq == prev.seq + 1 and record.prev_hash != prev.hash:
            return False
        prev = record
    return len(records) == count


async def _decision(gateway: Gateway, view: CredentialView, reveal: Reveal, count: int) -> None:
    """`WireCredentials.plan` and `allowed` (its audit record, for an injected
    request) alone, without sockets: the decision's share of the added latency."""
    wire = WireCredentials(
        "vbench0",
        ORG,
        view,
        reveal,
        limiter=RateLimiter(),
        audit=AuditChain(),
        tokens=gateway.tokens,
    )
    placeholder = next(e.placeholder for e in view.entries if e.kind == "placeholder")
    for mode, host in HOSTS.items():
        headers = [(b"host", host.encode()), (b"accept-encoding", b"identity")]
        if mode == "placeholder":
            headers.append((b"authorization", b"Bearer " + placeholder.encode()))
        request = WireRequest(host, "GET", b"/v1/echo", headers, tls=True)
        times: list[float] = []
        for _ in range(count):
            start = time.perf_counter()
            plan = await wire.plan(request)
            if isinstance(plan, Plan):
                wire.allowed(request, plan)
            times.append(time.perf_counter() - start)
        emit(summary(f"{mode}: plan+audit, sans-io", times, "us", 1e6))


def _load(when: str) -> None:
    load, cpus = os.getloadavg()[0], os.cpu_count() or 1
    busy = " (busy host: the latencies include waiting for a CPU)" if load > cpus else ""
    emit(f"load average {load:.2f} on {cpus} CPUs {when}{busy}")


def _chain_holds(run: Run) -> None:
    records = run.gateway.credential_audit.records
    if records and records[0].seq == 1 and verify(records) is not None:
        run.fail("the gateway's credential audit chain is broken")


def _writer(count: int, directory: Path) -> None:
    """The audit writer's append rate next to raw writes of the same size."""
    event = AuditEvent(
        org_id=ORG,
        who="sandbox:vbench0",
        decision="allow",
        sandbox_id="vbench0",
        credential_id="cred_header",
        host=HOSTS["header"],
        method="GET",
        path="/v1/echo",
        latency_ms=0.123,
    )
    memory = AuditChain()
    value("audit chain, in memory", _rate(count, lambda: memory.append(event)), "records/s")
    path = directory / "writer.jsonl"
    filed = AuditChain(AuditFile(path))
    rate = _rate(count, lambda: filed.append(event))
    value("audit chain + AuditFile", rate, "records/s", "open, append, close; no fsync")
    line = path.read_bytes().splitlines(keepends=True)[-1]
    raw = directory / "raw.jsonl"

    def append(sync: bool) -> None:
        fd = os.open(raw, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)

    note = f"{len(line)} B lines to {directory.parent}"
    value("floor: raw open-append-close", _rate(count, lambda: append(False)), "writes/s", note)
    value("floor: raw append + fsync", _rate(count, lambda: append(True)), "writes/s", note)
    if verify(AuditFile(path).records()) is not None:
        emit("FAILED: the AuditFile written by the writer bench does not verify")


def _rate(count: int, step: Callable[[], object], budget: float = 5.0) -> float:
    """Operations per second over `count` calls (fewer if `budget` seconds pass)."""
    start = time.perf_counter()
    done = 0
    while done < count:
        step()
        done += 1
        if done % 50 == 0 and time.perf_counter() - start > budget:
            break
    return done / (time.perf_counter() - start)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=300, help="requests per kind")
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--audits", type=int, default=2000, help="records per writer figure")
    args = parser.parse_args()
    try:
        asyncio.run(main(args.requests, args.connections, args.audits))
    except Exception as exc:  # a benchmark reports and never fails
        emit(f"failed: {type(exc).__name__}: {exc}")
