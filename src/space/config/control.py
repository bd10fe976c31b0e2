"""What the control plane runs on: the reconciler's cadence (`ControllerConfig`), the
database's timeouts (`DatabaseConfig`), and the many-node deployment: leader
election, the node registry and the tokens the nodes are driven with (`ClusterConfig`)."""

from __future__ import annotations

import re
import socket
from pathlib import Path

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from space.config.secrets import MIN_NODE_TOKEN, NodeTokenError, read_private, token_from


class ControllerConfig(BaseSettings):
    """Reconciler and expiry-sweep cadence (`SPACE_CONTROLLER_RECONCILE_INTERVAL`,
    `SPACE_CONTROLLER_EXPIRY_INTERVAL`, ...). A data-plane call records the sandbox's
    activity when it starts and ends, at most every `activity_interval` seconds per
    sandbox and API process: an idle suspend can come that much early at worst."""

    model_config = SettingsConfigDict(env_prefix="SPACE_CONTROLLER_", extra="ignore")

    reconcile_interval: float = Field(default=5.0, gt=0)
    restart_backoff: float = Field(default=1.0, gt=0)
    expiry_interval: float = Field(default=1.0, gt=0)
    activity_interval: float = Field(default=0.25, ge=0, le=60)


class DatabaseConfig(BaseSettings):
    """How long a call waits on a database that does not answer (`SPACE_DB_*`, seconds).

    PostgreSQL only: a connect gives up after `connect_timeout`, a statement after
    `statement_timeout`, a wait for a pooled connection after `pool_timeout`; the
    API then answers 503 `database_unavailable` with a `Retry-After`.
    """

    model_config = SettingsConfigDict(env_prefix="SPACE_DB_", extra="ignore")

    connect_timeout: int = Field(default=5, ge=1)
    statement_timeout: float = Field(default=30.0, gt=0)
    pool_timeout: float = Field(default=5.0, gt=0)


class ClusterConfig(BaseSettings):
    """How this process takes part in a many-node deployment (`SPACE_CLUSTER_*`).

    Leader election: a controller holds the PostgreSQL lease for `lease_seconds`,
    renews it every `retry_seconds` (also how often a follower tries to take it), and
    stops acting once `renew_deadline_seconds` pass without a renewal, before anyone
    else can take the lease. Node registry: a node reports itself as `node_name`
    (default: the host name) at `node_address` every `heartbeat_seconds`; one silent
    for `lost_after_seconds` is marked lost. With one of `node_tokens_dir`, `node_token`
    and `node_signing_key_file`, `space api` and `space controller` drive every registered node
    (`space.control.cluster`), node N at its registered address with the token in the
    0600 file `node_tokens_dir/N` (a token per node), or `node_token` (one token for
    every node: any node's token then opens all of them), or `node_signing_key_file`
    (an Ed25519 private key, PEM in a 0600 file: a short-lived token signed for each
    node by name, `space.seam.signing`; the nodes hold only the public key), re-reading
    the registry every `refresh_seconds`.
    """

    model_config = SettingsConfigDict(
        env_prefix="SPACE_CLUSTER_", extra="ignore", hide_input_in_errors=True
    )

    lease_seconds: float = Field(default=15.0, gt=0)
    renew_deadline_seconds: float = Field(default=10.0, gt=0)
    retry_seconds: float = Field(default=2.0, gt=0)
    node_name: str = Field(default="", max_length=253)
    node_address: str = Field(default="", max_length=255)
    heartbeat_seconds: float = Field(default=10.0, gt=0)
    lost_after_seconds: float = Field(default=60.0, gt=0)
    node_tokens_dir: Path | None = None
    node_token: SecretStr | None = None
    node_signing_key_file: Path | None = None
    refresh_seconds: float = Field(default=5.0, gt=0, le=3600)

    @property
    def own_node_name(self) -> str:
        """The name this node registers as: `node_name`, default the host name."""
        return self.node_name or socket.gethostname()

    @property
    def drives_nodes(self) -> bool:
        """Whether this control-plane process drives every registered node."""
        return self.node_credentials > 0

    @property
    def node_credentials(self) -> int:
        """How many of the three ways to authenticate to the nodes are set."""
        ways = (self.node_tokens_dir, self.node_token, self.node_signing_key_file)
        return sum(way is not None for way in ways)

    def token_for(self, name: str) -> str:
        """The token node `name` answers to (NodeTokenError if there is none usable)."""
        if self.node_tokens_dir is not None:
            return node_token(self.node_tokens_dir, name)
        if self.node_token is None:
            raise NodeTokenError("set SPACE_CLUSTER_NODE_TOKENS_DIR or SPACE_CLUSTER_NODE_TOKEN")
        return self.node_token.get_secret_value()

    def read_signing_key(self) -> bytes:
        """`node_signing_key_file`'s PEM (NodeTokenError if unset, unreadable, or group
        or others may read it)."""
        if self.node_signing_key_file is None:
            raise NodeTokenError("set SPACE_CLUSTER_NODE_SIGNING_KEY_FILE")
        return read_private(self.node_signing_key_file, "SPACE_CLUSTER_NODE_SIGNING_KEY_FILE")

    @model_validator(mode="after")
    def _ordered(self) -> ClusterConfig:
        if not self.retry_seconds < self.renew_deadline_seconds < self.lease_seconds:
            raise ValueError(
                "SPACE_CLUSTER_*: need retry_seconds < renew_deadline_seconds < lease_seconds"
            )
        if self.lost_after_seconds <= self.heartbeat_seconds:
            raise ValueError("SPACE_CLUSTER_LOST_AFTER_SECONDS must exceed HEARTBEAT_SECONDS")
        if self.node_credentials > 1:
            raise ValueError(
                "set one of SPACE_CLUSTER_NODE_TOKENS_DIR, SPACE_CLUSTER_NODE_TOKEN and"
                " SPACE_CLUSTER_NODE_SIGNING_KEY_FILE"
            )
        if self.node_token is not None and len(self.node_token.get_secret_value()) < MIN_NODE_TOKEN:
            raise ValueError(
                f"SPACE_CLUSTER_NODE_TOKEN must be at least {MIN_NODE_TOKEN} characters"
            )
        return self


def node_token(tokens_dir: Path, name: str) -> str:
    """Node `name`'s token in `SPACE_CLUSTER_NODE_TOKENS_DIR` (NodeTokenError if the
    name cannot be a file name, or the file is missing, short or readable by others)."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}", name) or ".." in name:
        raise NodeTokenError(f"node name {name!r} cannot name a token file")
    return token_from(tokens_dir / name, "SPACE_CLUSTER_NODE_TOKENS_DIR file")
