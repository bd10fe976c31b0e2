"""Egress for the node: the gateway plus each sandbox's firewall, behind four calls.

`attach` applies the namespace's nftables and registers the namespace with the
gateway under the sandbox's slot; `trust` installs that sandbox's CA certificate in
the guest (the key never leaves the host); `set_policy` applies a new policy version
to a running sandbox; `detach` closes the gateway's side; `audit` reads a sandbox's
newest decisions back from the gateway's bounded ring. Host resources die with
the namespace, so the startup sweep needs nothing extra.

The operator ceiling (`space.egress.ceiling`) is rebuilt from the host while the
node serves sandboxes: on every attach and every `refresh_seconds`, from the
operator's open ranges, every address the node holds and the protected hosts
(control plane, database). A changed ceiling goes to the gateway (applied to every
policy and open connection) and to the nftables fence on upstream sockets.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from space.credentials.scopes import CredentialView
from space.credentials.wire import Reveal
from space.egress.ceiling import Ceiling, IPAddress, IPNetwork
from space.egress.policy import Policy
from space.gateway import Gateway, UnknownSandbox
from space.gateway.audit import AuditRecord
from space.gateway.limits import GatewayLimits
from space.node.agent import calls
from space.node.agent.calls import AgentCall
from space.node.network import fence, firewall, hostaddrs
from space.node.network.netns import NetworkError, SandboxNetwork
from space.seam.values import EgressRecord
from space.tasks import TaskSet

log = logging.getLogger(__name__)
RESOLVE_TIMEOUT = 5.0

GUEST_CA = "/usr/local/share/ca-certificates/space-gateway.crt"
GUEST_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
CA_ENV = {
    "SSL_CERT_FILE": GUEST_BUNDLE,
    "REQUESTS_CA_BUNDLE": GUEST_BUNDLE,
    "CURL_CA_BUNDLE": GUEST_BUNDLE,
    "PIP_CERT": GUEST_BUNDLE,
    "NODE_EXTRA_CA_CERTS": GUEST_CA,
}
# Appending to the bundle is what curl, Python's ssl, requests and pip on Debian read;
# (update-ca-certificates would take seconds under TCG). Login shells get the env vars.
_PIP_CONF = f"[global]\ncert = {GUEST_BUNDLE}\n".encode()
_PROFILE = "".join(f"export {k}={v}\n" for k, v in CA_ENV.items()).encode()


@dataclass(frozen=True)
class EgressConfig:
    """`SPACE_GATEWAY_RESOLVER` (host[:port]), `SPACE_GATEWAY_CA_FILE`, and for tests the
    namespace the gateway's upstream sockets are made in (None: the node's own).

    The ceiling: `open_ranges` (`SPACE_EGRESS_OPEN_CIDRS`), `protected_hosts` (the
    API's and database's hosts), `refresh_seconds`, and for tests the namespace
    whose addresses count as the node's (None: this process's).

    `limits`: the gateway's per-sandbox and node-wide limits. `credential_audit`: the
    JSON-lines file the gateway's credential decisions are chained into (None: memory only)."""

    resolver: str = ""
    ca_file: Path | None = None
    upstream_netns: str | None = None
    open_ranges: tuple[IPNetwork, ...] = ()
    protected_hosts: tuple[str, ...] = ()
    refresh_seconds: float = 10.0
    host_netns: str | None = None
    limits: GatewayLimits = GatewayLimits()
    credential_audit: Path | None = None

    def resolver_address(self) -> tuple[str, int]:
        text = self.resolver or _system_resolver()
        host, _, port = text.partition(":")
        return host, int(port or 53)


class Egress:
    """`name` (the node's namespace prefix) names this node's upstream fence table."""

    def __init__(self, config: EgressConfig | None = None, *, name: str = "space") -> None:
        config = config or EgressConfig()
        self.name = name
        self._config = config
        self._upstream_netns = config.upstream_netns
        self._fenced: Ceiling | None = None
        self._protected: set[IPAddress] = set()
        self._watch = TaskSet(f"egress-{name}")
        self.gateway = Gateway(
            resolver=config.resolver_address(),
            ca_file=config.ca_file,
            upstream_netns=config.upstream_netns,
            mark=fence.mark_for(name),
            limits=config.limits,
            credential_audit=config.credential_audit,
        )

    async def attach(
        self,
        slot: str,
        network: SandboxNetwork,
        policy: Mapping[str, Any] | None,
        *,
        sandbox_id: str | None = None,
    ) -> None:
        ports = self.gateway.ports
        redirects = firewall.Redirects(ports.dns, ports.http, ports.https)
        await asyncio.to_thread(firewall.apply, network, redirects)
        await self.refresh_ceiling()
        await self.gateway.register(slot, network.netns, policy, label=sandbox_id)
        await self._sync_fence()

    async def reattach(self, slot: str, network: SandboxNetwork) -> bool:
        """A restored sandbox's new namespace: same policy, same CA as before.

        Returns True when this gateway did not know the sandbox (a node restart):
        it then has a new CA that the guest must be told to `trust`.
        """
        ports = self.gateway.ports
        redirects = firewall.Redirects(ports.dns, ports.http, ports.https)
        await asyncio.to_thread(firewall.apply, network, redirects)
        await self.refresh_ceiling()
        try:
            await self.gateway.move(slot, network.netns)
        except UnknownSandbox:
            await self.gateway.register(slot, network.netns, None)
            await self._sync_fence()
            return True
        return False

    def trust_calls(self, slot: str) -> list[AgentCall]:
        """The agent calls that install the sandbox's CA certificate in the guest's trust
        stores (sent with its personalisation, in one batch)."""
        pem = self.gateway.gate(slot).ca.certificate_pem
        return [
            calls.put_file(GUEST_CA, pem),
            calls.put_file(GUEST_BUNDLE, pem, append=True),
            calls.put_file("/etc/pip.conf", _PIP_CONF),
            calls.put_file("/etc/profile.d/space-ca.sh", _PROFILE),
        ]

    async def claim(self, slot: str, policy: Mapping[str, Any] | None, sandbox_id: str) -> None:
        """A warm VM (attached and trusting its CA already) now serves `sandbox_id`."""
        self.gateway.gate(slot).sandbox_id = sandbox_id
        await self.set_policy(slot, policy)

    async def set_policy(self, slot: str, policy: Mapping[str, Any] | None) -> Policy:
        return self.gateway.set_policy(slot, policy)

    def set_credentials(self, slot: str, org_id: str, view: CredentialView, reveal: Reveal) -> None:
        """The sandbox's credential view, applied by its gateway from the next request."""
        self.gateway.set_credentials(slot, org_id, view, reveal)

    def credentials_version(self, slot: str) -> int | None:
        return self.gateway.credentials_version(slot)

    def audit(self, sandbox_id: str, limit: int) -> list[EgressRecord]:
        """The sandbox's newest `limit` decisions, newest first."""
        records = self.gateway.audit.for_sandbox(sandbox_id)
        return [_egress_record(r) for r in reversed(records[-limit:])] if limit > 0 else []

    async def detach(self, slot: str) -> None:
        await self.gateway.unregister(slot)
        await self._sync_fence()

    async def close(self) -> None:
        await self.gateway.close()
        await self._sync_fence()

    async def refresh_ceiling(self) -> Ceiling:
        """Rebuild the ceiling from the host; apply it where it changed."""
        config = self._config
        pinned = await asyncio.to_thread(hostaddrs.interface_addresses, config.host_netns)
        try:
            async with asyncio.timeout(RESOLVE_TIMEOUT):
                found = await asyncio.to_thread(hostaddrs.host_addresses, config.protected_hosts)
            self._protected |= found  # kept: a host that moves leaves its old address pinned
        except TimeoutError:
            log.warning("resolving the protected hosts timed out; keeping the last addresses")
        ceiling = Ceiling.build(config.open_ranges, pinned | self._protected)
        if ceiling != self.gateway.ceiling:
            self.gateway.set_ceiling(ceiling)
            await self._sync_fence()
        return ceiling

    async def _sync_fence(self) -> None:
        """Keep the nftables fence equal to the gateway's ceiling, and the ceiling fresh;
        the table exists only while this node serves a sandbox (see `fence.sweep`)."""
        if not self.gateway.serving():
            if self._fenced is not None:
                await self._watch.cancel_all()
                await asyncio.to_thread(fence.remove, self.name, self._upstream_netns)
                self._fenced = None
            return
        wanted, first = self.gateway.ceiling, self._fenced is None
        if first:
            await asyncio.to_thread(fence.sweep, self._upstream_netns)
        if wanted != self._fenced:
            await asyncio.to_thread(fence.apply, self.name, self._upstream_netns, wanted)
            self._fenced = wanted
        if first:
            self._watch.spawn(self._refresh_forever(), name="ceiling")

    async def _refresh_forever(self) -> None:
        while True:
            await asyncio.sleep(self._config.refresh_seconds)
            try:
                await self.refresh_ceiling()
            except (OSError, ValueError, NetworkError) as exc:
                log.warning("refreshing the egress ceiling failed (kept the last): %s", exc)


def _system_resolver(path: Path = Path("/etc/resolv.conf")) -> str:
    try:
        for line in path.read_text().splitlines():
            fields = line.split()
            if len(fields) >= 2 and fields[0] == "nameserver" and ":" not in fields[1]:
                return fields[1]
    except OSError:
        pass
    return "127.0.0.1"


def _egress_record(record: AuditRecord) -> EgressRecord:
    return EgressRecord(
        at=record.at,
        kind=record.kind,
        decision=record.decision,
        reason=record.reason,
        policy_version=record.policy_version,
        host=record.host,
        sni=record.sni,
        address=record.address,
        method=record.method,
        path=record.path,
        rule=record.rule,
        status=record.status,
    )
