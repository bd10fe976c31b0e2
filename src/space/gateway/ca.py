"""A certificate authority per sandbox and the one-SAN leaf certificates it mints.

Only `certificate_pem` leaves the host (into the guest's trust store); the keys stay
in this process. Leaves name exactly one DNS host (no wildcards, no IP SANs) and are
cached with their server-side `ssl.SSLContext`; `host_of` maps a context back to the
host it serves, which is how the proxy learns the SNI it accepted.
"""

from __future__ import annotations

import datetime
import os
import ssl
import tempfile
from collections import OrderedDict
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

LEAF_CACHE = 256
ALPN = ["h2", "http/1.1"]


class SandboxCA:
    def __init__(self, sandbox_id: str) -> None:
        self.sandbox_id = sandbox_id
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._leaf_key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "SPACE egress gateway"),
                x509.NameAttribute(NameOID.COMMON_NAME, f"SPACE sandbox {sandbox_id} CA"),
            ]
        )
        self._name = name
        builder = _base(name, name, self._key.public_key(), days=3650)
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=0), True)
        builder = builder.add_extension(_key_usage(ca=True), True)
        builder = builder.add_extension(
            x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), False
        )
        self.certificate = builder.sign(self._key, hashes.SHA256())
        self._contexts: OrderedDict[str, ssl.SSLContext] = OrderedDict()
        self._hosts: dict[int, str] = {}

    @property
    def certificate_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def leaf(self, host: str) -> x509.Certificate:
        """A certificate for exactly `host` (already normalised and allowed)."""
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
        builder = _base(subject, self._name, self._leaf_key.public_key(), days=7)
        builder = builder.add_extension(x509.BasicConstraints(ca=False, path_length=None), True)
        builder = builder.add_extension(_key_usage(ca=False), True)
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False
        )
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), False)
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()), False
        )
        return builder.sign(self._key, hashes.SHA256())

    def context_for(self, host: str) -> ssl.SSLContext:
        """The server context presenting `host`'s leaf (minted once, LRU-cached)."""
        context = self._contexts.get(host)
        if context is not None:
            self._contexts.move_to_end(host)
            return context
        context = server_context()
        _load_chain(context, self.leaf(host), self._leaf_key)
        self._contexts[host] = context
        self._hosts[id(context)] = host
        if len(self._contexts) > LEAF_CACHE:
            _, old = self._contexts.popitem(last=False)
            self._hosts.pop(id(old), None)
        return context

    def host_of(self, context: ssl.SSLContext) -> str | None:
        return self._hosts.get(id(context))


def server_context() -> ssl.SSLContext:
    """TLS 1.2+, ALPN h2/http1.1, no session tickets (no resumption across names)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_TICKET | ssl.OP_NO_COMPRESSION
    context.num_tickets = 0
    context.set_alpn_protocols(ALPN)
    return context


def _base(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey, days: int
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=days))
    )


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


def _load_chain(
    context: ssl.SSLContext, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> None:
    """`ssl` loads chains only from files: a private directory, removed at once."""
    with tempfile.TemporaryDirectory(prefix="space-leaf-") as directory:
        path = Path(directory) / "chain.pem"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(cert.public_bytes(serialization.Encoding.PEM))
            handle.write(
                key.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption(),
                )
            )
        context.load_cert_chain(path)
