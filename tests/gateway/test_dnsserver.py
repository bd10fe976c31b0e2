"""The resolver's answer path with a fake upstream: what is asked upstream, and when."""

from __future__ import annotations

from dnslib import RCODE, DNSRecord

from space.egress.policy import Policy
from space.gateway.audit import AuditLog
from space.gateway.dnsserver import answer
from space.gateway.sandbox import SandboxGate


class FakeUpstreams:
    def __init__(self) -> None:
        self.asked: list[str] = []

    async def addresses(self, host: str, policy: Policy) -> list[str]:
        self.asked.append(host)
        return ["198.51.100.10"]


def gate() -> SandboxGate:
    policy = Policy.parse({"mode": "allowlist", "allow": ["allowed.test"]}, version=3)
    return SandboxGate("sb", "ns", policy, AuditLog())


async def test_only_allowed_a_questions_reach_the_upstream() -> None:
    sandbox, upstreams = gate(), FakeUpstreams()
    for name, qtype in (
        ("x.exfil.test", "A"),
        ("allowed.test", "TXT"),
        ("allowed.test", "ANY"),
        ("allowed.test", "AAAA"),
    ):
        packet = await answer(sandbox, upstreams, DNSRecord.question(name, qtype).pack())  # type: ignore[arg-type]
        assert packet is not None and not DNSRecord.parse(packet).rr
    assert upstreams.asked == []
    packet = await answer(sandbox, upstreams, DNSRecord.question("Allowed.Test.", "A").pack())  # type: ignore[arg-type]
    assert packet is not None
    reply = DNSRecord.parse(packet)
    assert reply.header.rcode == RCODE.NOERROR and str(reply.rr[0].rdata) == "198.51.100.10"
    assert upstreams.asked == ["allowed.test"]
    assert sandbox.resolved == {"allowed.test": ["198.51.100.10"]}
    records = sandbox._audit.records
    assert [r.decision for r in records] == ["deny", "deny", "deny", "allow", "allow"]
    assert all(r.policy_version == 3 and r.kind == "dns" for r in records)


async def test_garbage_is_dropped_without_an_answer() -> None:
    assert await answer(gate(), FakeUpstreams(), b"\x01\x02") is None  # type: ignore[arg-type]
