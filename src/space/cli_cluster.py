"""The many-node composition: `space api` and `space controller` with
`SPACE_CLUSTER_NODE_TOKENS_DIR` (or `SPACE_CLUSTER_NODE_TOKEN`) drive every registered
`space node` through one `Cluster`, node N over HTTP at its registered address."""

from __future__ import annotations

from collections.abc import Callable

from space.config import NodeTokenError, Settings
from space.control.cluster import Cluster
from space.seam.remote import RemoteNode
from space.store.db import Database
from space.store.nodes import NodeInfo


def cluster_of(settings: Settings, db: Database) -> Cluster:
    config = settings.cluster
    return Cluster(
        db,
        _connector(settings),
        call_timeout=settings.timeouts.node_call,
        refresh_seconds=config.refresh_seconds,
    )


def _connector(settings: Settings) -> Callable[[NodeInfo], RemoteNode]:
    link = settings.node_link
    cluster = settings.cluster

    def connect(info: NodeInfo) -> RemoteNode:
        if not info.address.startswith(("http://", "https://")):
            raise NodeTokenError(f"node {info.name} registered {info.address!r}, not a URL")
        return RemoteNode(
            info.address,
            cluster.token_for(info.name),
            connect_timeout=link.connect_timeout,
            call_timeout=link.call_timeout,
            max_message_bytes=link.max_message_bytes,
            max_connections=link.max_connections,
            max_streams=link.max_streams,
        )

    return connect
