"""Host name normalisation: the one place that decides what a name in SNI, Host,
`:authority`, a DNS question or a policy entry means.

A name is lower-cased, loses one trailing dot, and must then be plain LDH labels
(punycode `xn--` labels must decode); raw non-ASCII, empty labels, underscores and
anything that a resolver or URL parser could read as an IP address are refused.
"""

from __future__ import annotations

import ipaddress
import re

_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_NUMERIC_TAIL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")


class BadName(ValueError):
    """A name that is not a plain DNS host name."""


def normalise(name: str) -> str:
    """The canonical form of a host name, or `BadName`."""
    if not name.isascii():
        raise BadName(f"non-ASCII host name {name!r} (send punycode)")
    host = name.lower()
    if host.endswith("."):
        host = host[:-1]
    if not host or len(host) > 253:
        raise BadName(f"host name {name!r} is empty or too long")
    labels = host.split(".")
    for label in labels:
        _check_label(name, label)
    if _NUMERIC_TAIL.match(labels[-1]):
        raise BadName(f"{name!r} looks like an IP address")
    return host


def _check_label(name: str, label: str) -> None:
    if not _LABEL.match(label):
        raise BadName(f"host name {name!r} has an invalid label {label!r}")
    if label[2:4] == "--" and not label.startswith("xn--"):
        raise BadName(f"host name {name!r} has a reserved label {label!r}")
    if label.startswith("xn--"):
        try:
            decoded = label.encode("ascii").decode("idna")
        except UnicodeError as exc:
            raise BadName(f"host name {name!r} has invalid punycode {label!r}") from exc
        if decoded.isascii():
            raise BadName(f"host name {name!r} hides an ASCII label in punycode")


def policy_name(entry: str) -> str:
    """A policy entry's name: Unicode is accepted here and turned into punycode."""
    try:
        ascii_name = entry.encode("idna").decode("ascii") if not entry.isascii() else entry
    except UnicodeError as exc:
        raise BadName(f"cannot encode {entry!r} as punycode") from exc
    return normalise(ascii_name)


def ip_literal(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address if `text` is an IP literal (brackets allowed for IPv6)."""
    candidate = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    if ":" not in candidate and not candidate.replace(".", "").isdigit():
        return None  # what `ip_address` would refuse: IPv6 has a colon, IPv4 only digits
    try:
        return ipaddress.ip_address(candidate)
    except ValueError:
        return None


def split_authority(authority: str, default_port: int) -> tuple[str, int]:
    """`host[:port]` from a Host header or `:authority`; the host is not yet normalised."""
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            raise BadName(f"unterminated IPv6 literal in {authority!r}")
        host, rest = authority[: end + 1], authority[end + 1 :]
    else:
        host, sep, port_text = authority.partition(":")
        rest = sep + port_text
    if not rest:
        return host, default_port
    if not rest.startswith(":") or not rest[1:].isdigit() or len(rest) > 6:
        raise BadName(f"bad port in {authority!r}")
    port = int(rest[1:])
    if not 0 < port < 65536:
        raise BadName(f"port out of range in {authority!r}")
    return host, port
