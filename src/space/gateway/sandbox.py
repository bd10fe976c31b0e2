"""What the gateway holds for one sandbox: its policy, CA, open client connections,
and its `Admission` (the counters its limits are checked against).

`credentials` (set live by `set_credentials`) puts the sandbox's credentials on
the requests the policy allowed (`space.credentials.wire`).

The TLS base context's SNI callback is where a handshake is decided: the SNI must be
a normalised name the policy allows, or the handshake fails with
`unrecognized_name`; otherwise the connection switches to that host's leaf context.
"""

from __future__ import annotations

import ssl
from typing import Protocol

from space.credentials.wire import Denied, Plan, WireCredentials, WireRequest
from space.egress.policy import Policy, Request, decide
from space.gateway.audit import AuditLog, AuditRecord
from space.gateway.ca import SandboxCA, server_context
from space.gateway.limits import Admission, GatewayLimits, NodeQuotas
from space.tasks import TaskSet


class ClientConnection(Protocol):
    """A guest connection the gateway may close when the policy changes."""

    request: Request | None  # the last request it was allowed to make

    @property
    def busy(self) -> bool: ...

    def abort(self) -> None: ...


class SandboxGate:
    def __init__(
        self,
        sandbox_id: str,
        netns: str,
        policy: Policy,
        audit: AuditLog,
        *,
        limits: GatewayLimits | None = None,
        node: NodeQuotas | None = None,
    ) -> None:
        self.sandbox_id = sandbox_id
        self.netns = netns
        self.policy = policy
        self.limits = limits or GatewayLimits()
        self.admission = Admission(self.limits, node or NodeQuotas.of(self.limits))
        self.ca = SandboxCA(sandbox_id)
        self.tasks = TaskSet()
        self.connections: set[ClientConnection] = set()
        self.resolved: dict[str, list[str]] = {}
        self.credentials: WireCredentials | None = None
        self._audit = audit
        self.tls_context = server_context()
        self.tls_context.sni_callback = self._on_sni

    def audit(self, record: AuditRecord) -> None:
        self._audit.write(record)

    def set_policy(self, policy: Policy) -> None:
        """Swap the policy; idle connections and those to hosts now denied are closed."""
        self.policy = policy
        for connection in list(self.connections):
            request = connection.request
            if not connection.busy or request is None or not decide(request, policy).allowed:
                connection.abort()

    def set_credentials(self, credentials: WireCredentials | None) -> None:
        """Hold the sandbox's credentials; the next request uses them (no restart)."""
        self.credentials = credentials

    async def plan(self, request: WireRequest) -> Plan | Denied:
        """The credentials applied to an allowed request (none when it has none)."""
        credentials = self.credentials
        if credentials is None:
            return Plan(request.headers, (), (), 0.0)
        return await credentials.plan(request)

    def _on_sni(
        self, sslobj: ssl.SSLObject | ssl.SSLSocket, name: str | None, _: ssl.SSLContext
    ) -> int | None:
        policy = self.policy
        decision = decide(Request(name or "", 443, tls=True, sni=name), policy)
        self.audit(
            AuditRecord(
                self.sandbox_id,
                "tls",
                "allow" if decision.allowed else "deny",
                decision.reason,
                policy.version,
                sni=(name or "")[:255] or None,
                rule=decision.rule,
            )
        )
        if not decision.allowed or decision.host is None:
            return ssl.ALERT_DESCRIPTION_UNRECOGNIZED_NAME
        sslobj.context = self.ca.context_for(decision.host)
        return None

    async def close(self) -> None:
        for connection in list(self.connections):
            connection.abort()
        await self.tasks.cancel_all()
