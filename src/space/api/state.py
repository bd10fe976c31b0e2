"""What one API process holds: settings, database, node, controller, and the
services the fronts share (sandboxes, templates, snapshots, keys, credentials, E2B's
secrets, the process registry)."""

from __future__ import annotations

from dataclasses import dataclass, field

from space.api.token_secrets import TokenSecrets
from space.config import Settings
from space.control.errors import NodeUnavailable
from space.control.expiry import Activity
from space.control.waiter import Lifecycle
from space.seam.protocol import NodeClient
from space.services.credential_admin import CredentialAdmin
from space.services.keys import KeyService
from space.services.processes import ProcessRegistry
from space.services.sandboxes import SandboxService
from space.services.secrets import SecretService
from space.services.snapshots import SnapshotService
from space.services.templates import TemplateService
from space.store.db import Database


@dataclass
class AppState:
    settings: Settings
    db: Database
    node_client: NodeClient | None
    lifecycle: Lifecycle
    sandboxes: SandboxService
    registry: ProcessRegistry | None
    templates: TemplateService
    snapshots: SnapshotService
    keys: KeyService
    credentials: CredentialAdmin
    secrets: SecretService
    tokens: TokenSecrets  # what envd access tokens and private sandboxes' URLs are signed with
    activity: Activity = field(default_factory=Activity)

    @property
    def node(self) -> NodeClient:
        if self.node_client is None:
            raise NodeUnavailable()
        return self.node_client

    @property
    def processes(self) -> ProcessRegistry:
        """The registry of the process holding the node (503 on an API-only replica)."""
        if self.registry is None:
            raise NodeUnavailable()
        return self.registry
