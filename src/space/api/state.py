"""What one API process holds: settings, database, node, controller, command hub."""

from __future__ import annotations

from dataclasses import dataclass, field

from space.api.hub import CommandHub
from space.config import Settings
from space.control.errors import NodeUnavailable
from space.control.expiry import Activity
from space.control.waiter import Lifecycle
from space.seam.protocol import NodeClient
from space.store.db import Database


@dataclass
class AppState:
    settings: Settings
    db: Database
    node_client: NodeClient | None
    lifecycle: Lifecycle
    hub: CommandHub | None
    activity: Activity = field(default_factory=Activity)

    @property
    def node(self) -> NodeClient:
        if self.node_client is None:
            raise NodeUnavailable()
        return self.node_client

    @property
    def commands(self) -> CommandHub:
        if self.hub is None:
            raise NodeUnavailable()
        return self.hub
