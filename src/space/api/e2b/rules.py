"""E2B's `network.rules` read as uses of E2B secrets (`SecretUse`).

    {"api.openai.com": [{"transform": {"headers": {
        "Authorization": "Bearer ${e2b.secrets.openai}"}}}]}

is one use: on `api.openai.com` the gateway sets `Authorization` to `Bearer
{value}` with the secret `openai`'s value (SPACE's `HeaderApply`); the guest never
sees the value, the marker or a placeholder. A rule opens no egress: as on E2B,
the host must also be allowed by the sandbox's egress policy, and a rule for a
host the policy denies never applies.

Refused with a 400 naming the field (SPACE cannot honour them): a key that is an
IP or CIDR rather than a host name (or `*.domain`), a header value without
exactly one `${e2b.secrets.NAME}` (SPACE sets no fixed headers, nor two secrets in
one header), any other `${e2b.` marker (workload identity), a rule or transform
field other than `transform` / `headers`. Bounded: at most `MAX_USES` headers in
all. Which names are secrets of the org is checked by the create
(`SandboxService`, a 422 naming the field).
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import TypeAdapter, ValidationError

from space.api.e2b.errors import E2bError
from space.credentials.model import HeaderApply, HostPattern
from space.services.sandboxes import SecretUse

MAX_USES = 64
MARKER = re.compile(r"\$\{e2b\.secrets\.([^{}]*)\}")
_HOSTS: TypeAdapter[str] = TypeAdapter(HostPattern)


def secret_uses(rules: dict[str, Any] | None) -> tuple[SecretUse, ...]:
    """Every header of every rule as a use, in the order given."""
    uses: list[SecretUse] = []
    for key, host_rules in (rules or {}).items():
        host = _host(key)
        if not isinstance(host_rules, list):
            raise E2bError(400, f"network.rules[{key!r}]: a list of rules")
        for i, rule in enumerate(host_rules):
            uses.extend(_rule(host, f"network.rules[{key!r}][{i}]", rule))
    if len(uses) > MAX_USES:
        raise E2bError(400, f"network.rules: at most {MAX_USES} headers in all")
    return tuple(uses)


def _host(key: str) -> str:
    try:
        return _HOSTS.validate_python(key)
    except ValidationError:
        message = f"network.rules[{key!r}]: SPACE applies rules to host names (or *.domain) only"
        raise E2bError(400, message) from None


def _rule(host: str, where: str, rule: object) -> list[SecretUse]:
    if not isinstance(rule, dict) or set(rule) - {"transform"}:
        raise E2bError(400, f"{where}: SPACE takes only a rule's `transform`")
    transform = rule.get("transform") or {}
    if not isinstance(transform, dict) or set(transform) - {"headers"}:
        raise E2bError(400, f"{where}.transform: SPACE takes only `headers`")
    headers = transform.get("headers") or {}
    if not isinstance(headers, dict):
        raise E2bError(400, f"{where}.transform.headers: a map of header to value")
    return [
        _use(host, f"{where}.transform.headers[{name!r}]", name, value)
        for name, value in headers.items()
    ]


def _use(host: str, where: str, header: object, value: object) -> SecretUse:
    if not isinstance(header, str) or not isinstance(value, str):
        raise E2bError(400, f"{where}: header names and values are strings")
    names = MARKER.findall(value)
    if len(names) != 1:
        why = "SPACE sets a header only from one secret, `${e2b.secrets.NAME}`"
        raise E2bError(400, f"{where}: {why}")
    template = MARKER.sub("{value}", value)
    if "${e2b." in template:
        raise E2bError(400, f"{where}: only `${{e2b.secrets.NAME}}` markers are supported")
    try:
        application = HeaderApply(header=header, template=template)
    except ValidationError as exc:
        problem = exc.errors()[0].get("msg", "invalid")
        raise E2bError(400, f"{where}: {problem}") from None
    return SecretUse(where=where, name=names[0].lower(), host=host, application=application)
