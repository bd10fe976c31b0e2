"""The two kinds of guest the red-team cases run against, behind one small interface.

`VmGuest` is a real sandbox on a `LocalNode` (the suite's point); `NsGuest` is a
namespace on a veth (`vethguest`), which runs the same cases in seconds.
"""

from __future__ import annotations

from typing import Any, Protocol

from space.gateway.audit import AuditRecord
from space.node.local import LocalNode
from space.node.network.egress import Egress
from space.seam.values import ExecRequest
from tests.redteam.vethguest import Result, VethGuest

GUEST_CA = "/usr/local/share/ca-certificates/space-gateway.crt"


class Guest(Protocol):
    kind: str

    async def run(self, *argv: str, timeout: float = 60) -> Result: ...

    async def set_policy(self, policy: dict[str, Any] | None) -> None: ...

    def audit(self) -> list[AuditRecord]: ...


class VmGuest:
    kind = "vm"

    def __init__(self, node: LocalNode, sandbox_id: str) -> None:
        self.node = node
        self.sandbox_id = sandbox_id

    async def run(self, *argv: str, timeout: float = 60) -> Result:
        request = ExecRequest(args=tuple(argv), timeout=timeout)
        result = await self.node.exec(self.sandbox_id, request)
        return Result(
            result.exit_code,
            result.stdout.decode(errors="replace"),
            result.stderr.decode(errors="replace"),
        )

    async def set_policy(self, policy: dict[str, Any] | None) -> None:
        await self.node.set_network_policy(self.sandbox_id, policy)

    def audit(self) -> list[AuditRecord]:
        return self.node.egress.gateway.audit.for_sandbox(self.sandbox_id)


class NsGuest:
    kind = "netns"

    def __init__(self, egress: Egress, veth: VethGuest, ca_path: str) -> None:
        self.egress = egress
        self.veth = veth
        self.ca_path = ca_path

    async def run(self, *argv: str, timeout: float = 60) -> Result:
        env = ("env", f"SSL_CERT_FILE={self.ca_path}", f"CURL_CA_BUNDLE={self.ca_path}")
        return await self.veth.run(*env, *argv, timeout=timeout)

    async def set_policy(self, policy: dict[str, Any] | None) -> None:
        await self.egress.set_policy(self.veth.sandbox_id, policy)

    def audit(self) -> list[AuditRecord]:
        return self.egress.gateway.audit.for_sandbox(self.veth.sandbox_id)
