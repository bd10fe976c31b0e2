"""The `space` command.

Server side (`up`, `api`, `controller`, `node`, `keys`, `doctor`) reads the same
settings as the server (`SPACE_*`); client side (`sandbox`, `ls`, `exec`, `shell`,
`cp`, `logs`: `cli_client`; `credentials`; `templates`: `cli_templates`) talks to the
API (`SPACE_API_URL`, `SPACE_API_KEY`). Human tables by default, `--json` for scripts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import socket
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import asdict, replace
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from space.cli.client import SHORT, add_sandbox_commands, add_short_commands
from space.cli.output import BuildProgress, err, out, table
from space.config import (
    NodeLinkConfig,
    NodeTokenError,
    RecoveryConfig,
    ServerConfig,
    Settings,
    TimeoutConfig,
)
from space.private import private_dir, private_umask, tighten
from space.rlimits import raise_nofile
from space.sdk import SpaceError, TransportError
from space.seam.protocol import NodeClient

if TYPE_CHECKING:
    from space.control.leader import Fence
    from space.node.auth import Gate
    from space.node.local import LocalNode
    from space.node.network.egress import EgressConfig
    from space.node.templates import Progress
    from space.node.vmm.jail import JailConfig
    from space.node.warm import WarmSizing
    from space.seam.remote import RemoteNode
    from space.store.db import Database
    from space.store.keys import KeyInfo

log = logging.getLogger(__name__)

Handler = Callable[[argparse.Namespace], int]

# Processes that write server state, so run with umask 077.
SERVER_COMMANDS = frozenset({"up", "api", "controller", "node", "keys", "audit"})
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
CLIENT_COMMANDS = frozenset({"sandbox", "credentials", "templates", *SHORT})


class OpenNode(NodeClient, Protocol):
    """A node a server process opens before its first call and closes at the end."""

    async def open(self) -> None: ...

    async def aclose(self) -> None: ...


def settings_from(args: argparse.Namespace) -> Settings:
    overrides: dict[str, Any] = {}
    for name in ("data_dir", "cache_dir"):
        if getattr(args, name, None):
            overrides[name] = Path(getattr(args, name))
    server = {k: getattr(args, k) for k in ("host", "port") if getattr(args, k, None) is not None}
    if server:
        overrides["server"] = ServerConfig(**server)
    return Settings(**overrides)


# -- server processes ------------------------------------------------------------


def prepare_server(args: argparse.Namespace) -> Settings:
    """A serving process's settings, once its file-descriptor budget is raised, its
    data dir private (0700) and an older install's group/other-readable files
    (database, logs, keys, pool image) tightened."""
    settings = settings_from(args)
    raise_nofile()
    tighten(private_dir(settings.data_dir))
    return settings


def cmd_up(args: argparse.Namespace) -> int:
    """API + controller + local node in one process, once the host passes `space doctor`'s
    checks (without its boot-speed probe)."""
    if _host_refused(args):
        return 3
    settings = prepare_server(args)
    asyncio.run(_serve_with_node(settings))
    return 0


def _host_refused(args: argparse.Namespace) -> bool:
    """True (the reasons printed) if this host fails `space doctor`'s checks."""
    from space.cli.doctor.checks import failures, refusal, run_checks

    findings = run_checks(settings_from(args))
    if failures(findings):
        err(refusal(findings))
        return True
    return False


async def _serve_with_node(settings: Settings) -> None:
    async with _hosted_node(settings) as (node, db):
        registries = [node.egress.gateway.metrics.registry, node.metrics.registry]
        await _serve_api(settings, node, db, registries=registries, reconcile=True)


@asynccontextmanager
async def _hosted_node(settings: Settings) -> AsyncIterator[tuple[LocalNode, Database]]:
    """This host's node, open and registered (heartbeating) while the block runs, and the
    database it registers in; closed after (SIGTERM/SIGINT held until then), its
    sandboxes' VMs left for the next start to adopt."""
    from space.api.bootstrap import open_database
    from space.control.registry import keep_registered

    db = open_database(settings)
    node = _local_node(settings)
    await node.open()
    registered = asyncio.ensure_future(
        keep_registered(db, node, settings.cluster, settings.data_dir, settings.node.build_slots)
    )
    with _signals_after_cleanup():
        try:
            yield node, db
        finally:
            registered.cancel()
            await asyncio.wait({registered})
            await node.aclose()
            db.dispose()
            log.info("node closed; sandboxes' VMs left for adoption")


async def _serve_api(
    settings: Settings,
    node: NodeClient,
    db: Database,
    *,
    registries: Sequence[Any] = (),
    reconcile: bool,
) -> None:
    """The API with a node (and its ingress) until uvicorn stops; `reconcile`: this
    process also runs the reconciler (`space up`; not an API replica)."""
    from space.api.app import create_app

    app = create_app(settings, node, db=db, run_controller=reconcile, metrics_from=registries)
    await app.state.ingress.start()
    _announce(settings)
    ingress = settings.ingress
    out(f"sandbox URLs: http://<port>-<sandbox id>.{ingress.domain} ({ingress.host})")
    try:
        await _uvicorn(app, settings)
    finally:
        await app.state.ingress.aclose()


@contextmanager
def _signals_after_cleanup() -> Iterator[None]:
    """uvicorn re-raises the SIGTERM/SIGINT it drained on, which would end the process
    before the node's close path runs (leaving warm VMs behind): hold them until the
    block's cleanup is done, then raise them with the handlers from before."""
    caught: list[int] = []
    previous = {sig: signal.signal(sig, lambda s, _f: caught.append(s)) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for number in caught:
            signal.raise_signal(number)


def _local_node(settings: Settings) -> LocalNode:
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
    metrics = NodeMetrics(lambda: [*host.sandboxes.values(), *warm.entries()])
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


def cmd_api(args: argparse.Namespace) -> int:
    """An API replica. With `SPACE_NODE_URL`: data-plane calls, creates, deletes and
    power operations go to that `space node` (the leading `space controller`
    reconciles); without: no node, creation waits for `space controller`."""
    from space.api.app import create_app

    settings = prepare_server(args)
    if settings.node_link.url or settings.cluster.drives_nodes:
        try:
            asyncio.run(_serve_api_remote(settings))
        except NodeTokenError as exc:
            err(f"error: {exc}")
            return 2
        return 0
    app = create_app(settings, None)
    _announce(settings)
    asyncio.run(_uvicorn(app, settings))
    return 0


async def _serve_api_remote(settings: Settings) -> None:
    from space.api.bootstrap import open_database

    db = open_database(settings)
    try:
        node = _node_of(settings, db)
        await node.open()
        try:
            await _serve_api(settings, node, db, reconcile=False)
        finally:
            await node.aclose()
    finally:
        db.dispose()


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


def _node_of(settings: Settings, db: Database) -> OpenNode:
    """Every registered node (`SPACE_CLUSTER_NODE_TOKENS_DIR`/`_TOKEN`), else `SPACE_NODE_URL`'s
    node over HTTP, else this host's node in-process."""
    if settings.cluster.drives_nodes:
        from space.cli.cluster import cluster_of

        return cluster_of(settings, db)
    if settings.node_link.url:
        return remote_node(settings.node_link)
    return _local_node(settings)


def cmd_controller(args: argparse.Namespace) -> int:
    """The reconciler over the database, driving this host's node in-process, or the
    `space node` at `SPACE_NODE_URL`."""
    settings = prepare_server(args)
    try:
        asyncio.run(_run_controller(settings))
    except NodeTokenError as exc:
        err(f"error: {exc}")
        return 2
    return 0


async def _run_controller(settings: Settings) -> None:
    """Leads (or waits to), reconciling over its node (or nodes); registers it unless it
    is remote (a `space node` registers itself)."""
    from space.api.bootstrap import open_database
    from space.control.leader import Leadership
    from space.control.registry import keep_registered

    db = open_database(settings)
    try:
        node = _node_of(settings, db)
    except NodeTokenError:
        db.dispose()
        raise
    await node.open()
    leadership = Leadership(db=db, config=settings.cluster)
    err(f"space controller {leadership.holder} over {settings.database_url.split('@')[-1]}")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    leading = asyncio.ensure_future(
        leadership.run(lambda fence: _reconcile(settings, db, node, fence))
    )
    stopping = asyncio.ensure_future(stop.wait())
    tasks: set[asyncio.Future[Any]] = {leading, stopping}
    if not (settings.node_link.url or settings.cluster.drives_nodes):
        tasks.add(
            asyncio.ensure_future(
                keep_registered(
                    db, node, settings.cluster, settings.data_dir, settings.node.build_slots
                )
            )
        )
    try:
        await asyncio.wait({leading, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)
        await node.aclose()
        db.dispose()
    if leading.done() and not leading.cancelled():
        leading.result()  # a failed reconciler ends the process (its supervisor restarts it)


async def _reconcile(settings: Settings, db: Database, node: NodeClient, fence: Fence) -> None:
    """One term of leadership: the reconciler and the idle/timeout sweep, fenced by the
    lease, and the lost-node detector, until the term ends (the task is cancelled)."""
    from space.api.app import after_pass
    from space.api.audit_copy import AuditCopy
    from space.api.credential_push import CredentialPush
    from space.api.credential_service import CredentialService
    from space.control.builds import BuildLimits
    from space.control.controller import Controller
    from space.control.registry import detect_lost_nodes

    credentials = CredentialService(settings, db)
    timeout = settings.timeouts.node_call
    controller = Controller(
        db=db,
        node=node,
        timeouts=settings.timeouts,
        config=settings.controller,
        builds=BuildLimits.of(settings),
        fence=fence.check,
        others_act=True,
        drains=settings.cluster.drives_nodes,
        after_pass=after_pass(
            CredentialPush(credentials, db, node, timeout),
            AuditCopy(db, credentials.audit_file, node, timeout),
        ),
    )
    controller.start()
    try:
        await detect_lost_nodes(db, settings.cluster, fence.check)
    finally:
        await controller.aclose()


def cmd_doctor(args: argparse.Namespace) -> int:
    """Check this host for `space up`: 0 when it can run, 3 on a failed check."""
    from space.cli.doctor.checks import failures, run_checks

    findings = run_checks(settings_from(args), probe_boot=not args.no_boot_probe)
    if args.json:
        out(json.dumps([asdict(finding) for finding in findings]))
    else:
        rows = [(f.status.upper(), f.check, f.detail, f.fix) for f in findings]
        table(rows, ["STATUS", "CHECK", "DETAIL", "FIX"])
    return 3 if failures(findings) else 0


def cmd_node(args: argparse.Namespace) -> int:
    """This host's node worker served over HTTP on `SPACE_NODE_LISTEN` (`--host`/`--port`
    override it), behind its gate (the node token, or tokens the control plane signs for
    it), registered and heartbeating as `space up`'s; refused without a token or trust
    key or on a host that fails `space doctor`'s checks."""
    from space.node.auth import gate_of

    settings = settings_from(args)
    try:
        gate = gate_of(settings.node_link, settings.cluster.own_node_name)
    except NodeTokenError as exc:
        err(f"error: {exc}")
        return 2
    if _host_refused(args):
        return 3
    listen = _listen(settings.node_link, args)
    asyncio.run(_serve_node(_addressed(prepare_server(args), listen), gate, listen))
    return 0


def _addressed(settings: Settings, listen: tuple[str, int]) -> Settings:
    """`settings` registering the node at its URL: `SPACE_CLUSTER_NODE_ADDRESS` if set,
    else `http://<listen host>:<port>` (the host name for a wildcard listen)."""
    if settings.cluster.node_address:
        return settings
    host, port = listen
    if host in ("", "0.0.0.0", "::"):
        host = socket.gethostname()
    elif ":" in host:
        host = f"[{host}]"
    cluster = settings.cluster.model_copy(update={"node_address": f"http://{host}:{port}"})
    return settings.model_copy(update={"cluster": cluster})


def _listen(link: NodeLinkConfig, args: argparse.Namespace) -> tuple[str, int]:
    host, port = link.host_port
    return args.node_host or host, port if args.node_port is None else args.node_port


async def _serve_node(settings: Settings, gate: Gate, listen: tuple[str, int]) -> None:
    from space.node.server import create_node_app
    from space.node.server_io import WS_MAX_FRAME

    async with _hosted_node(settings) as (node, _db):
        app = create_node_app(node, gate, settings.node_link)
        out(f"SPACE node listening on http://{listen[0]}:{listen[1]}")
        drain = settings.node_link.drain_seconds  # process streams last as long as the process
        await _uvicorn_at(app, listen, ws_max_size=WS_MAX_FRAME, drain=drain)


def _announce(settings: Settings) -> None:
    out(f"SPACE API listening on http://{settings.server.host}:{settings.server.port}")
    if settings.bootstrap_key:
        out("admin key: the value of SPACE_BOOTSTRAP_KEY")
    else:
        out(f"admin key: {settings.admin_key_path}")


async def _uvicorn(app: Any, settings: Settings) -> None:
    listen = (settings.server.host, settings.server.port)
    # a bigger WebSocket frame than the console's PTY takes is refused unread
    await _uvicorn_at(app, listen, ws_max_size=settings.console.pty_message_bytes)


async def _uvicorn_at(
    app: Any, listen: tuple[str, int], *, ws_max_size: int, drain: int | None = None
) -> None:
    import uvicorn

    host, port = listen
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="info",
        ws_max_size=ws_max_size,
        timeout_graceful_shutdown=drain,
    )
    await uvicorn.Server(config).serve()


def cmd_keys_create(args: argparse.Namespace) -> int:
    from space.api.bootstrap import open_database
    from space.store.keys import KeyRepo
    from space.store.models import utcnow

    expires = utcnow() + timedelta(seconds=args.expires_in) if args.expires_in else None
    db = open_database(settings_from(args))
    try:
        with db.session() as session:
            repo = KeyRepo(session)
            issued = repo.issue(args.org, args.project, expires_at=expires, role=args.role)
    finally:
        db.dispose()
    if args.json:
        expires_at = issued.expires_at.isoformat() if issued.expires_at else None
        out(
            json.dumps(
                {
                    "key": issued.key,
                    "id": issued.key_id,
                    "org": issued.org,
                    "project": issued.project,
                    "role": issued.role,
                    "expires_at": expires_at,
                }
            )
        )
    else:
        out(issued.key)
    return 0


def _key_json(info: KeyInfo) -> dict[str, object]:
    when = {
        "created_at": info.created_at,
        "expires_at": info.expires_at,
        "revoked_at": info.revoked_at,
    }
    fields: dict[str, object] = {
        "id": info.id,
        "prefix": info.prefix,
        "org": info.org,
        "project": info.project,
        "admin": info.is_admin,
        "role": info.role,
    }
    return fields | {name: value.isoformat() if value else None for name, value in when.items()}


def _role(value: str) -> str:
    from space.store import roles

    if not roles.valid(value):
        raise argparse.ArgumentTypeError(f"{value!r}: a role matches {roles.ROLE_PATTERN}")
    return value


def cmd_keys_list(args: argparse.Namespace) -> int:
    """Every key (of `--org`): id, prefix, status; never a key's value."""
    from space.api.bootstrap import open_database
    from space.store.keys import KeyRepo

    db = open_database(settings_from(args))
    try:
        with db.session() as session:
            keys = KeyRepo(session).list_keys()
    finally:
        db.dispose()
    keys = [info for info in keys if args.org in (None, info.org)]
    if args.json:
        out(json.dumps([_key_json(info) for info in keys]))
        return 0
    rows = [
        (
            info.id,
            info.prefix,
            info.org,
            info.project or "",
            info.role,
            _key_status(info),
            info.expires_at or "",
        )
        for info in keys
    ]
    table(rows, ["ID", "PREFIX", "ORG", "PROJECT", "ROLE", "STATUS", "EXPIRES"])
    return 0


def _key_status(info: KeyInfo) -> str:
    from space.store.models import utcnow

    if info.revoked_at is not None:
        return "revoked"
    if info.expires_at is not None and info.expires_at <= utcnow():
        return "expired"
    return "admin" if info.is_admin else "active"


def cmd_keys_revoke(args: argparse.Namespace) -> int:
    """Revoke keys by id: every path they reach stops at once."""
    from space.api.bootstrap import open_database
    from space.store.errors import NotFound
    from space.store.keys import KeyRepo

    db = open_database(settings_from(args))
    revoked: list[KeyInfo] = []
    try:
        for key_id in args.ids:
            with db.session() as session:
                try:
                    revoked.append(KeyRepo(session).revoke(key_id))
                except NotFound as exc:
                    err(f"error: {exc}")
                    return 1
    finally:
        db.dispose()
    if args.json:
        out(json.dumps([_key_json(info) for info in revoked]))
    else:
        for info in revoked:
            out(f"revoked {info.id} ({info.prefix}…, org {info.org})")
    return 0


# -- templates -------------------------------------------------------------------


def cmd_template_ls(args: argparse.Namespace) -> int:
    from space.node.templates import TEMPLATES
    from space.node.templates.registry import Registry

    imported = Registry(settings_from(args).cache_dir)
    rows = [(n, "built-in", "") for n in sorted(TEMPLATES)]
    for name in imported.names():
        newest = imported.newest(name)
        rows.append((name, "imported", newest.manifest if newest else ""))
    if args.json:
        out(json.dumps([{"name": n, "kind": k, "manifest": m or None} for n, k, m in rows]))
    else:
        table(rows, ["NAME", "KIND", "MANIFEST"])
    return 0


def cmd_template_import(args: argparse.Namespace) -> int:
    from space.node.templates import BuildError
    from space.node.templates.imports import import_template

    progress = BuildProgress()
    try:
        settings = settings_from(args)
        imported = import_template(
            settings.cache_dir,
            args.name,
            args.source,
            progress=progress,
            insecure=settings.node.insecure_registries,
        )
    except (BuildError, OSError) as exc:
        progress.finish()
        err(f"import failed: {exc}")
        return 1
    progress.finish()
    version = imported.version
    state = "cached" if imported.cached else "imported"
    if args.json:
        out(json.dumps({"name": imported.name, "state": state, **asdict(version)}))
    else:
        table([(imported.name, version.manifest, version.digest, state)],
              ["NAME", "MANIFEST", "DIGEST", "STATE"])  # fmt: skip
    return 0


def cmd_template_build(args: argparse.Namespace) -> int:
    from space.node.templates import build_all

    settings = settings_from(args)
    names = tuple(args.names) or ("base", "busybox")
    progress = BuildProgress()
    _guest, images = build_all(settings.cache_dir, names, progress)
    progress.finish()
    rows = [(name, image.digest, str(image.rootfs)) for name, image in images.items()]
    if args.json:
        out(json.dumps([{"name": n, "digest": d, "rootfs": r} for n, d, r in rows]))
    else:
        table(rows, ["NAME", "DIGEST", "ROOTFS"])
    return 0


# -- parser ----------------------------------------------------------------------


def _server_flags(parser: argparse.ArgumentParser, *, listen: bool) -> None:
    parser.add_argument("--data-dir", help="state directory (SPACE_DATA_DIR)")
    if listen:
        parser.add_argument("--host", help="listen address (default 127.0.0.1)")
        parser.add_argument("--port", type=int, help="listen port (default 8080)")


def _json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _command(sub: Any, name: str, handler: Handler, help_text: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help_text)
    parser.set_defaults(handler=handler)
    return parser


def _positive_seconds(value: str) -> int:
    if not value.isdigit() or int(value) <= 0:
        raise argparse.ArgumentTypeError(f"{value!r} is not a positive number of seconds")
    return int(value)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="space", description="SPACE microVM sandboxes")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="group", required=True)  # `command`: exec's argv

    _server_flags(
        _command(sub, "up", cmd_up, "API, controller and node in one process"), listen=True
    )
    _server_flags(_command(sub, "api", cmd_api, "an API replica (no node)"), listen=True)
    _server_flags(_command(sub, "controller", cmd_controller, "the reconciler"), listen=False)
    node = _command(sub, "node", cmd_node, "this host's node worker served over HTTP")
    node.add_argument("--data-dir", help="state directory (SPACE_DATA_DIR)")
    node.add_argument("--host", dest="node_host", help="listen host (SPACE_NODE_LISTEN)")
    node.add_argument("--port", dest="node_port", type=int, help="listen port (SPACE_NODE_LISTEN)")
    doctor = _command(sub, "doctor", cmd_doctor, "check this host for `space up`")
    doctor.add_argument(
        "--no-boot-probe", action="store_true", help="skip booting the guest to time KVM vs TCG"
    )
    doctor.add_argument("--cache-dir", help="SPACE_CACHE_DIR")
    _server_flags(doctor, listen=False)
    _json_flag(doctor)

    keys = sub.add_parser("keys", help="API keys").add_subparsers(dest="keys_cmd", required=True)
    create_key = _command(keys, "create", cmd_keys_create, "make an API key")
    create_key.add_argument("--org", required=True)
    create_key.add_argument("--project")
    create_key.add_argument(
        "--role",
        type=_role,
        default="admin",
        help="admin (default: the org), developer, sandbox (an agent's key) or a custom role",
    )
    create_key.add_argument(
        "--expires-in", type=_positive_seconds, metavar="SECONDS", help="the key expires then"
    )
    _json_flag(create_key)
    _server_flags(create_key, listen=False)
    list_keys = _command(keys, "list", cmd_keys_list, "list keys by id and prefix (no values)")
    list_keys.add_argument("--org", help="only this org's keys")
    _json_flag(list_keys)
    _server_flags(list_keys, listen=False)
    revoke = _command(keys, "revoke", cmd_keys_revoke, "revoke keys by id, effective at once")
    revoke.add_argument("ids", nargs="+", metavar="ID")
    _json_flag(revoke)
    _server_flags(revoke, listen=False)

    from space.cli.admin import register as register_nodes  # it builds on this module

    register_nodes(sub)
    from space.cli.credentials import register as register_credentials  # as cli_nodes

    register_credentials(sub)
    from space.cli.templates import register as register_templates  # as cli_nodes

    register_templates(sub)
    sandbox = sub.add_parser("sandbox", help="sandboxes (via SPACE_API_URL/SPACE_API_KEY)")
    add_sandbox_commands(sandbox.add_subparsers(dest="sandbox_cmd", required=True))
    add_short_commands(sub)

    template = sub.add_parser("template", help="templates")
    tp = template.add_subparsers(dest="template_cmd", required=True)
    ls = _command(tp, "ls", cmd_template_ls, "list known templates (built-in and imported)")
    ls.add_argument("--cache-dir", help="SPACE_CACHE_DIR")
    _json_flag(ls)
    imp = _command(tp, "import", cmd_template_import, "import a container image as a template")
    imp.add_argument("name", help="[a-z0-9][a-z0-9-]{0,62}, not a built-in name")
    imp.add_argument(
        "source", help="oci:DIR[:TAG], oci-archive:PATH, docker-archive:PATH or docker://REF"
    )
    imp.add_argument("--cache-dir", help="SPACE_CACHE_DIR")
    _json_flag(imp)
    build = _command(tp, "build", cmd_template_build, "build templates into the cache")
    build.add_argument("names", nargs="*", help="default: base busybox")
    build.add_argument("--cache-dir", help="SPACE_CACHE_DIR")
    _json_flag(build)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for noisy in ("alembic", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    handler: Handler = args.handler
    if args.group in SERVER_COMMANDS:
        private_umask()  # what it, mkfs or QEMU create is private from the first file on
    if args.group in CLIENT_COMMANDS and not os.environ.get("SPACE_API_KEY"):
        err("error: set SPACE_API_KEY (and SPACE_API_URL, default http://127.0.0.1:8080)")
        return 2
    try:
        return handler(args)
    except TransportError as exc:
        err(f"error: cannot reach the SPACE API (SPACE_API_URL): {exc}")
        return 1
    except (SpaceError, OSError) as exc:
        err(f"error: {exc}")
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
