"""What the node worker runs on: how it uses its host (`NodeConfig`), the node seam
over HTTP (`NodeLinkConfig`), how a restarted node adopts its VMs (`RecoveryConfig`)
and the VMM driver and its confinement (`VmmConfig`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from space.config.secrets import MIN_NODE_TOKEN, NodeTokenError, read_bounded, token_from
from space.config.units import GIB, MIB


def default_build_slots() -> int:
    """Half the host's CPUs, at least 2. A build VM is busy on its CPU (package
    installs, compiles; every guest instruction under TCG), so half the cores leaves the
    rest to sandboxes; 2 at least, so one org's long build never holds a small host's
    only slot (with the per-org cap at half the slots, another org always has one)."""
    return max(2, (os.cpu_count() or 1) // 2)


class NodeConfig(BaseSettings):
    """`SPACE_NODE_*`, plus `SPACE_POOL_SIZE`: how the node worker uses this host.

    `shared_snapshots`: a directory every node mounts (NFS); each suspend is published
    there, so a lost or drained node's suspended sandboxes restore on another node.
    `insecure_registries`: `HOST[:PORT]`s a `docker://` template import pulls from
    without verifying TLS (comma-separated). `build_slots`: how many template builds
    the node runs at once (`default_build_slots`). `on_stop`: what `space node` does on
    SIGTERM: `leave` (at once: it is `lost`, its VMs run on for its next start to adopt)
    or `drain` (it goes `draining` and keeps serving while the leading controller moves
    its sandboxes away, for at most `stop_drain_seconds`, then leaves)."""

    model_config = SettingsConfigDict(
        env_prefix="SPACE_NODE_", extra="ignore", populate_by_name=True
    )

    run_dir: Path = Path("/run/space")
    net_prefix: str = Field(default="space", pattern=r"^[a-z][a-z0-9]{0,11}$")
    warm_pool: dict[str, int] = Field(default_factory=lambda: {"base": 2})
    warm_pool_max: int = Field(default=0, ge=0, le=256)
    warm_refill: int = Field(default=1, ge=1, le=16)
    warm_reserve_mib: int = Field(default=2048, ge=0, le=1 << 20)
    base_snapshots: bool = True
    shared_snapshots: Path | None = None
    build_slots: int = Field(default_factory=default_build_slots, ge=1, le=64)
    insecure_registries: Annotated[tuple[str, ...], NoDecode] = ()
    pool_size: str = Field(
        default="64G", pattern=r"^[0-9]+[KMGT]$", validation_alias="SPACE_POOL_SIZE"
    )
    on_stop: Literal["leave", "drain"] = "leave"
    stop_drain_seconds: int = Field(default=600, ge=1, le=86400)

    @field_validator("insecure_registries", mode="before")
    @classmethod
    def _registries(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value


class NodeLinkConfig(BaseSettings):
    """The node seam over HTTP (`space node`, and `space api`/`space controller` that
        reach it): `SPACE_NODE_URL` (http(s)://host:port of a `space node`; unset: the
        process builds its node in-process, as before), `SPACE_NODE_LISTEN` (host:port
        `space node` serves on), the per-node bearer token in `SPACE_NODE_TOKEN_FILE`
        (refused when group or others may read it) or `SPACE_NODE_TOKEN`, at least
        `MIN_NODE_TOKEN` characters, or instead, on a node, `SPACE_NODE_TRUST_KEY_FILE`: the
        control plane's Ed25519 public key (PEM), which the tokens it signs for this node
        by name are checked with (`space.node.auth`). Bounds: `max_message_bytes` for
        one JSON message or stream line (either way), `max_upload_bytes` for one `write_file` body,
        `max_handles` open process streams a node serves, `max_connections` pooled
    connections for unary calls and `max_streams` for streams a client holds; timeouts
        in seconds: `connect_timeout`, `call_timeout` for a unary call (not `exec`, which
        its own timeout bounds, nor streams, which last as long as their process)."""

    model_config = SettingsConfigDict(
        env_prefix="SPACE_NODE_", extra="ignore", populate_by_name=True, hide_input_in_errors=True
    )

    url: str = Field(
        default="", pattern=r"^(https?://[^/?#\s]{1,255})?$", validation_alias="SPACE_NODE_URL"
    )
    listen: str = Field(
        default="127.0.0.1:8090",
        pattern=r"^[^\s/]{1,255}:[0-9]{1,5}$",
        validation_alias="SPACE_NODE_LISTEN",
    )
    token: SecretStr | None = Field(default=None, validation_alias="SPACE_NODE_TOKEN")
    token_file: Path | None = Field(default=None, validation_alias="SPACE_NODE_TOKEN_FILE")
    trust_key_file: Path | None = Field(default=None, validation_alias="SPACE_NODE_TRUST_KEY_FILE")
    connect_timeout: float = Field(
        default=5.0, gt=0, le=600, validation_alias="SPACE_NODE_CONNECT_TIMEOUT"
    )
    call_timeout: float = Field(
        default=300.0, gt=0, le=86400, validation_alias="SPACE_NODE_CALL_TIMEOUT"
    )
    max_message_bytes: int = Field(
        default=64 * MIB, ge=64 * 1024, le=GIB, validation_alias="SPACE_NODE_MAX_MESSAGE_BYTES"
    )
    max_upload_bytes: int = Field(default=GIB, gt=0, validation_alias="SPACE_NODE_MAX_UPLOAD_BYTES")
    max_handles: int = Field(
        default=4096, ge=1, le=1 << 20, validation_alias="SPACE_NODE_MAX_HANDLES"
    )
    max_connections: int = Field(
        default=64, ge=1, le=4096, validation_alias="SPACE_NODE_MAX_CONNECTIONS"
    )
    drain_seconds: int = Field(
        default=10, ge=1, le=3600, validation_alias="SPACE_NODE_DRAIN_SECONDS"
    )
    max_streams: int = Field(
        default=1024, ge=1, le=1 << 16, validation_alias="SPACE_NODE_MAX_STREAMS"
    )

    @field_validator("token")
    @classmethod
    def _long_token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < MIN_NODE_TOKEN:
            raise ValueError(f"SPACE_NODE_TOKEN must be at least {MIN_NODE_TOKEN} characters")
        return value

    @property
    def host_port(self) -> tuple[str, int]:
        """`SPACE_NODE_LISTEN` split."""
        host, _, port = self.listen.rpartition(":")
        return host.strip("[]"), int(port)

    def read_token(self) -> str:
        """The node token: `SPACE_NODE_TOKEN_FILE` if set, else `SPACE_NODE_TOKEN`;
        `NodeTokenError` without one, for a file group or others may read, or a short one."""
        if self.token_file is None:
            if self.token is None:
                raise NodeTokenError(
                    "no node token: set SPACE_NODE_TOKEN_FILE (a 0600 file) or SPACE_NODE_TOKEN"
                    " (or, on a node, SPACE_NODE_TRUST_KEY_FILE)"
                )
            return self.token.get_secret_value()
        return token_from(self.token_file)

    def read_trust_key(self) -> bytes:
        """`SPACE_NODE_TRUST_KEY_FILE`'s PEM (public: any mode); NodeTokenError if unset
        or unreadable."""
        if self.trust_key_file is None:
            raise NodeTokenError("set SPACE_NODE_TRUST_KEY_FILE")
        return read_bounded(self.trust_key_file, "SPACE_NODE_TRUST_KEY_FILE")


class RecoveryConfig(BaseSettings):
    """How a restarted node adopts the VMs a previous run left alive
    (`SPACE_RECOVERY_AGENT_DEADLINE`, ...): the agent handshake of an adopted VM is
    retried, each attempt longer and after a growing pause, until the deadline."""

    model_config = SettingsConfigDict(env_prefix="SPACE_RECOVERY_", extra="ignore")

    agent_deadline: float = Field(default=180.0, gt=0)
    agent_attempt: float = Field(default=10.0, gt=0)
    backoff: float = Field(default=0.5, gt=0)
    backoff_max: float = Field(default=8.0, gt=0)


class VmmConfig(BaseSettings):
    """The VMM driver (`SPACE_VMM`: `qemu`, the default, or `firecracker`, which needs a
    `firecracker` binary on PATH) and its confinement (`SPACE_VMM_*`): each VM's own uid
    from `uid_base` on, its cgroup's limits (`memory_overhead_mib` on top of the sandbox's
    memory, `pids_max`, io per vCPU), `cgroups` = `auto` (v2 if mounted with its
    controllers, else v1), `v1` or `v2`."""

    model_config = SettingsConfigDict(
        env_prefix="SPACE_VMM_", extra="ignore", populate_by_name=True
    )

    driver: Literal["qemu", "firecracker"] = Field(default="qemu", validation_alias="SPACE_VMM")
    confine: bool = True
    uid_base: int = Field(default=900_000_000, ge=1000, le=4_000_000_000)
    uid_count: int = Field(default=65_536, ge=1, le=1_000_000)
    lease_dir: Path = Path("/run/space-vmm-uids")
    cgroups: Literal["auto", "v1", "v2"] = "auto"
    memory_overhead_mib: int = Field(default=256, ge=32)
    pids_max: int = Field(default=256, ge=16)
    io_bps_per_vcpu: int = Field(default=200 << 20, gt=0)
    io_iops_per_vcpu: int = Field(default=4000, gt=0)
