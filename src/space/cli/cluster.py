"""The many-node composition: `space api` and `space controller` with
`SPACE_CLUSTER_NODE_TOKENS_DIR`, `SPACE_CLUSTER_NODE_TOKEN` or
`SPACE_CLUSTER_NODE_SIGNING_KEY_FILE` drive every registered `space node` through one
`Cluster`, node N over HTTP at its registered address with N's token (its file, the
shared one, or one signed for N and re-minted before it expires)."""

from __future__ import annotations

from collections.abc import Callable

from space.config import Settings
from space.config.control import ClusterConfig
from space.config.secrets import NodeTokenError
from space.control.cluster import Cluster
from space.seam import signing
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
    token_for = _tokens(settings.cluster)

    def connect(info: NodeInfo) -> RemoteNode:
        if not info.address.startswith(("http://", "https://")):
            raise NodeTokenError(f"node {info.name} registered {info.address!r}, not a URL")
        return RemoteNode(
            info.address,
            token_for(info.name),
            connect_timeout=link.connect_timeout,
            call_timeout=link.call_timeout,
            max_message_bytes=link.max_message_bytes,
            max_connections=link.max_connections,
            max_streams=link.max_streams,
        )

    return connect


def _tokens(cluster: ClusterConfig) -> Callable[[str], str | Callable[[], str]]:
    """Node name -> its token: from `token_for`, or a `signing.NodeToken` of the signing
    key (read once, here: NodeTokenError if it is unusable)."""
    if cluster.node_signing_key_file is None:
        return cluster.token_for
    pem = cluster.read_signing_key()
    try:
        key = signing.private_key(pem)
    except ValueError as exc:
        path = cluster.node_signing_key_file
        raise NodeTokenError(f"SPACE_CLUSTER_NODE_SIGNING_KEY_FILE {path}: {exc}") from None
    return signing.Signer(key).tokens_for
