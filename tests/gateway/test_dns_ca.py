"""DNS answers for a sandbox and the per-sandbox CA, without sockets."""

from __future__ import annotations

import ssl

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from dnslib import RCODE, DNSRecord

from space.egress.policy import Policy
from space.gateway.ca import SandboxCA
from space.gateway.dnsanswer import Question, refusal, reply

POLICY = Policy.parse({"mode": "allowlist", "allow": ["allowed.test", "*.cdn.test"]})


def ask(name: str, qtype: str) -> Question:
    question = Question.parse(DNSRecord.question(name, qtype).pack())
    assert question is not None
    return question


@pytest.mark.parametrize("qtype", ["TXT", "NULL", "ANY", "MX", "CNAME", "SRV", "HTTPS", "PTR"])
def test_only_a_and_aaaa_are_served(qtype: str) -> None:
    packet, decision = refusal(ask("allowed.test", qtype), POLICY)
    assert packet is not None and not decision.allowed
    assert DNSRecord.parse(packet).header.rcode == RCODE.REFUSED


def test_names_outside_the_policy_are_nxdomain() -> None:
    for name in ("secret-data.exfil.test", "allowed.test.exfil.test", "cdn.test", "x_y.cdn.test"):
        packet, decision = refusal(ask(name, "A"), POLICY)
        assert packet is not None and not decision.allowed
        assert DNSRecord.parse(packet).header.rcode == RCODE.NXDOMAIN


def test_allowed_a_gets_addresses_and_aaaa_nothing() -> None:
    question = ask("Allowed.Test", "A")
    assert refusal(question, POLICY)[0] is None
    answer = DNSRecord.parse(reply(question, ["198.51.100.10"]))
    assert [str(rr.rdata) for rr in answer.rr] == ["198.51.100.10"]
    assert DNSRecord.parse(reply(question, [])).header.rcode == RCODE.SERVFAIL
    packet, _ = refusal(ask("a.cdn.test", "AAAA"), POLICY)
    assert packet is not None
    aaaa = DNSRecord.parse(packet)
    assert aaaa.header.rcode == RCODE.NOERROR and not aaaa.rr


def test_garbage_and_responses_are_dropped() -> None:
    assert Question.parse(b"\x00\x01garbage") is None
    response = DNSRecord.question("allowed.test", "A").reply().pack()
    assert Question.parse(response) is None
    record = DNSRecord.question("allowed.test", "A")
    record.header.opcode = 2
    question = Question.parse(record.pack())
    assert question is not None and refusal(question, POLICY)[0] is not None


def test_leaf_has_one_san_and_chains_to_the_sandbox_ca(tmp_path) -> None:  # type: ignore[no-untyped-def]
    ca = SandboxCA("sb1")
    leaf = ca.leaf("allowed.test")
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["allowed.test"]
    assert not san.get_values_for_type(x509.IPAddress)
    assert leaf.issuer == ca.certificate.subject
    leaf.verify_directly_issued_by(ca.certificate)
    context = ca.context_for("allowed.test")
    assert ca.context_for("allowed.test") is context and ca.host_of(context) == "allowed.test"
    assert context.options & ssl.OP_NO_TICKET
    other = SandboxCA("sb2")
    with pytest.raises((ValueError, InvalidSignature)):
        leaf.verify_directly_issued_by(other.certificate)
    assert b"PRIVATE" not in ca.certificate_pem
