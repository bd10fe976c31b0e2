"""DNS answers for one sandbox, without sockets.

`Question.parse` accepts exactly one IN question in a standard query; `refusal`
answers what the policy does not allow (NXDOMAIN for names it does not allow, REFUSED
for every type but A and AAAA, so nothing tunnels through TXT, NULL or ANY); `reply`
answers an allowed A question with addresses the gateway resolved itself, and an
allowed AAAA question with no records. Nothing is ever forwarded per label.
"""

from __future__ import annotations

from dataclasses import dataclass

from dnslib import QTYPE, RCODE, RR, A, DNSError, DNSRecord  # type: ignore[import-untyped]

from space.egress.policy import Decision, Policy, decide_name

ANSWER_TTL = 30


@dataclass(frozen=True)
class Question:
    record: DNSRecord
    name: str
    qtype: int

    @classmethod
    def parse(cls, packet: bytes) -> Question | None:
        """The single question of a query, or None for anything to drop silently."""
        try:
            record = DNSRecord.parse(packet)
        except (DNSError, ValueError, IndexError, UnicodeError):
            return None
        if record.header.qr or len(record.questions) != 1:
            return None
        question = record.questions[0]
        return cls(record, str(question.qname), int(question.qtype))


def refusal(question: Question, policy: Policy) -> tuple[bytes | None, Decision]:
    """The reply when the question must not be resolved (None when it may be)."""
    record = question.record
    if record.header.opcode != 0 or record.questions[0].qclass != 1:
        return _rcode(question, RCODE.REFUSED), Decision(False, "not a standard IN query")
    if question.qtype not in (QTYPE.A, QTYPE.AAAA):
        return _rcode(question, RCODE.REFUSED), Decision(False, "query type not served")
    decision = decide_name(question.name.rstrip(".") or ".", policy)
    if not decision.allowed:
        return _rcode(question, RCODE.NXDOMAIN), decision
    if question.qtype == QTYPE.AAAA:
        return _rcode(question, RCODE.NOERROR), decision
    return None, decision


def reply(question: Question, addresses: list[str]) -> bytes:
    """An A answer with `addresses`, or SERVFAIL when the gateway found none it may use."""
    if not addresses:
        return _rcode(question, RCODE.SERVFAIL)
    answer = question.record.reply()
    for address in addresses:
        answer.add_answer(RR(question.record.q.qname, QTYPE.A, rdata=A(address), ttl=ANSWER_TTL))
    packed: bytes = answer.pack()
    return packed


def _rcode(question: Question, rcode: int) -> bytes:
    answer = question.record.reply()
    answer.header.rcode = rcode
    packed: bytes = answer.pack()
    return packed
