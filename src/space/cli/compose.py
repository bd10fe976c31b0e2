"""The composition root: the one place a `LocalNode` is built from its services
(import-linter holds it: only `space.cli` imports `space.node.local`), and the node a
server process drives — this host's in-process, `SPACE_NODE_URL`'s over HTTP, or every
registered node through a `Cluster` (`cluster.py`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from space.config import Settings
from space.config.node import NodeLinkConfig, RecoveryConfig
from space.config.server import TimeoutConfig
from space.seam.protocol import NodeClient

if TYPE_CHECKING:
    from space.node.local import LocalNode
    from space.node.network.egress import EgressConfig
    from space.node.templates import Progress
    from space.node.vmm.jail import JailConfig
    from space.node.warm import WarmSizing
    from space.seam.remote import RemoteNode
    from space.store.db import Database


class OpenNode(NodeClient, Protocol):
    """A node a server process opens before its first call and closes at the end."""

    async def open(self) -> None: ...

    async def aclose(self) -> None: ...


def local_node_of(settings: Settings) -> LocalNode:
    """This host's node as `settings` configure it (`space up`, `space node`, and a
    `space controller` without `SPACE_NODE_URL` or a cluster)."""
    from space.gateway.limits import GatewayLimits
    from space.node.network.egress import EgressConfig
    from space.node.templates import StderrProgress
    from space.node.vmm.jail import JailConfig
    from space.node.warm import WarmSizing

    vmm = settings.vmm
    return local_node(
        data_dir=settings.data_dir,
        cache_dir=settings.cache_dir,
        accel=settings.accel,
        run_dir=settings.node.run_dir,
        net_prefix=settings.node.net_prefix,
        pool_size=settings.node.pool_size,
        progress=StderrProgress(),
        base_snapshots=settings.node.base_snapshots,
        warm_pools=settings.node.warm_pool,
        warm_sizing=WarmSizing(settings.node.warm_pool_max, settings.node.warm_refill),
        warm_reserve_mib=settings.node.warm_reserve_mib,
        egress=EgressConfig(
            settings.gateway.resolver,
            settings.gateway.ca_file,
            settings.gateway.upstream_netns,
            open_ranges=settings.egress.open_cidrs,
            protected_hosts=_protected_hosts(settings),
            refresh_seconds=settings.egress.refresh_seconds,
            limits=GatewayLimits.from_config(settings.gateway),
        ),
        jail=JailConfig(
            enabled=vmm.confine,
            uid_base=vmm.uid_base,
            uid_count=vmm.uid_count,
            lease_dir=vmm.lease_dir,
            cgroups=vmm.cgroups,
            memory_overhead_mib=vmm.memory_overhead_mib,
            pids_max=vmm.pids_max,
            io_bps_per_vcpu=vmm.io_bps_per_vcpu,
            io_iops_per_vcpu=vmm.io_iops_per_vcpu,
        ),
        console_log_bytes=settings.output.console_log_bytes,
        command_log_bytes=settings.output.command_log_bytes,
        agent_timeout=settings.timeouts.agent,
        vmm=vmm.driver,
        recovery=settings.recovery,
        shared_snapshots=settings.node.shared_snapshots,
        node_name=settings.cluster.own_node_name,
        build_slots=settings.node.build_slots,
    )


def local_node(
    *,
    data_dir: Path,
    cache_dir: Path,
    accel: str,
    run_dir: Path = Path("/run/space"),
    net_prefix: str = "space",
    pool_size: str = "64G",
    progress: Progress | None = None,
    base_snapshots: bool = True,
    warm_pools: dict[str, int] | None = None,
    warm_sizing: WarmSizing | None = None,
    warm_reserve_mib: int = 2048,
    egress: EgressConfig | None = None,
    jail: JailConfig | None = None,
    console_log_bytes: int = 4 << 20,
    command_log_bytes: int = 64 << 20,
    agent_timeout: float | None = None,
    vmm: str = "qemu",
    recovery: RecoveryConfig | None = None,
    shared_snapshots: Path | None = None,
    node_name: str = "",
    build_slots: int = 2,
) -> LocalNode:
    """This host's node worker wired from its services: the one place a `LocalNode` is
    built (the servers' composition root; tests and benchmarks build theirs here too).
    VmmUnavailable if the `vmm` driver (SPACE_VMM) cannot run on this host."""
    from space.node.agentops import AgentOps
    from space.node.catalog import TemplateCatalog
    from space.node.commands import NodeCommands
    from space.node.host import NodeHost
    from space.node.local import LocalNode
    from space.node.metrics import NodeMetrics
    from space.node.network.egress import Egress, EgressConfig
    from space.node.network.netns import NetworkManager
    from space.node.provision import Provisioning, warm_memory_mib
    from space.node.recovery import Recovery
    from space.node.vmm.factory import driver_maker
    from space.node.vmm.jail import JailConfig
    from space.node.warm import MemoryRoom, WarmPools

    driver = driver_maker(vmm, accel=accel, jail=jail or JailConfig(), run_dir=run_dir)
    host = NodeHost(
        data_dir=data_dir,
        cache_dir=cache_dir,
        run_dir=run_dir,
        pool_size=pool_size,
        net=NetworkManager(net_prefix),
        egress=Egress(_audited(egress or EgressConfig(), data_dir, net_prefix), name=net_prefix),
        driver=driver,
        progress=progress,
        console_log_bytes=console_log_bytes,
        agent_timeout=TimeoutConfig().agent if agent_timeout is None else agent_timeout,
        shared_snapshots=shared_snapshots,
        node_name=node_name,
    )
    templates = TemplateCatalog(cache_dir, progress)
    metrics = NodeMetrics(lambda: [*host.held(), *warm.entries()])
    provisioning = Provisioning(host, templates, metrics, base_snapshots=base_snapshots)
    warm = WarmPools(
        warm_pools or {},
        provisioning.fill_warm,
        lambda entry: host.teardown(entry.record.slot, entry),
        sizing=warm_sizing,
        room=MemoryRoom(warm_reserve_mib, warm_memory_mib),
    )
    return LocalNode(
        host=host,
        templates=templates,
        provisioning=provisioning,
        recovery=Recovery(host, recovery or RecoveryConfig()),
        agent_ops=AgentOps(host, metrics),
        warm_pools=warm,
        metrics=metrics,
        commands=NodeCommands(data_dir / "command-logs", command_log_bytes),
        build_slots=build_slots,
    )


def _audited(egress: EgressConfig, data_dir: Path, net_prefix: str) -> EgressConfig:
    """The gateway chains its credential decisions into `audit/gateway-<prefix>.jsonl`."""
    if egress.credential_audit is not None:
        return egress
    path = data_dir / "audit" / f"gateway-{net_prefix}.jsonl"
    return replace(egress, credential_audit=path)


def _protected_hosts(settings: Settings) -> tuple[str, ...]:
    """The API's listen host and the database's host: kept out of every sandbox's reach."""
    from sqlalchemy.engine import make_url

    database = make_url(settings.database_url).host
    return tuple(host for host in (settings.server.host, database) if host)


def remote_node(link: NodeLinkConfig) -> RemoteNode:
    """The `space node` at `SPACE_NODE_URL` (NodeTokenError without a usable token)."""
    from space.seam.remote import RemoteNode

    return RemoteNode(
        link.url,
        link.read_token(),
        connect_timeout=link.connect_timeout,
        call_timeout=link.call_timeout,
        max_message_bytes=link.max_message_bytes,
        max_connections=link.max_connections,
        max_streams=link.max_streams,
    )


def node_of(settings: Settings, db: Database) -> OpenNode:
    """Every registered node (`SPACE_CLUSTER_NODE_TOKENS_DIR`/`_TOKEN`), else `SPACE_NODE_URL`'s
    node over HTTP, else this host's node in-process."""
    if settings.cluster.drives_nodes:
        from space.cli.cluster import cluster_of

        return cluster_of(settings, db)
    if settings.node_link.url:
        return remote_node(settings.node_link)
    return local_node_of(settings)
