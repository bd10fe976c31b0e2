"""What `LocalNode`'s mixins (provisioning, recovery) may use of the node itself.

The mixins annotate `self` with `NodeInternals`, so mypy checks every attribute
they touch against this list, and `LocalNode` against the list where it mixes them in.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Protocol

from space.node.agent import AgentClient
from space.node.images import TemplateImporter
from space.node.network.egress import Egress
from space.node.network.netns import NetworkManager, SandboxNetwork
from space.node.records import RecordStore, SandboxRecord
from space.node.sandbox import Sandbox
from space.node.snapshotting import BootFiles, Snapshotter
from space.node.templates import GuestArtifacts, TemplateImage
from space.node.vmm.base import VmConfig, VmmDriver


class NodeInternals(Protocol):
    run_dir: Path
    _net: NetworkManager
    _egress: Egress
    _sandboxes: dict[str, Sandbox]
    _bases_lock: asyncio.Lock

    @property
    def _scratch(self) -> Path: ...

    async def destroy_sandbox(self, sandbox_id: str) -> None: ...

    async def _template(self, name: str) -> TemplateImage: ...

    def _vm_config(
        self, record: SandboxRecord, network: SandboxNetwork, boot: BootFiles | None = None
    ) -> VmConfig: ...

    async def _teardown(self, slot: str, sandbox: Sandbox | None) -> None: ...

    async def _rejoin_gateway(self, sandbox: Sandbox) -> None: ...

    def _save(self, sandbox: Sandbox, record: SandboxRecord) -> None: ...

    def _agent(self, sandbox_id: str) -> AgentClient: ...

    def _ready(self) -> tuple[RecordStore, TemplateImporter]: ...

    def _ready_driver(self) -> VmmDriver: ...

    def _ready_snapshotter(self) -> Snapshotter: ...

    def _ready_guest(self) -> GuestArtifacts: ...

    # provided by the mixins themselves
    async def _adopt(self, record: SandboxRecord) -> None: ...

    async def _remove_orphans(self, known: set[str]) -> None: ...

    async def _restore(self, sandbox: Sandbox, network: SandboxNetwork, snapshot: Path) -> None: ...

    async def _base_snapshot(self, image: TemplateImage, record: SandboxRecord) -> Path: ...

    async def _build_base(
        self, key: str, image: TemplateImage, template: SandboxRecord
    ) -> Path: ...
