"""The serving side of `space`: `up` (API, controller and this host's node in one
process), `api` (a replica), `controller` (the reconciler, leading or waiting to),
`node` (this host's node worker over HTTP) and `doctor` (whether this host can run
them; `up` and `node` refuse on a failed check). Each reads the server's settings
(`SPACE_*`); the nodes they drive come from the composition root (`compose.py`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import asdict
from functools import partial
from types import FrameType
from typing import TYPE_CHECKING, Any

from space.cli.common import add_command, json_flag, server_flags, settings_from
from space.cli.compose import local_node_of, node_of
from space.cli.output import err, out, table
from space.config import Settings
from space.config.node import NodeLinkConfig
from space.config.secrets import NodeTokenError
from space.credentials.crypto import KeyFileError
from space.private import private_dir, tighten
from space.rlimits import raise_nofile
from space.seam.protocol import NodeClient

if TYPE_CHECKING:
    from space.control.leader import Fence
    from space.node.auth import Gate
    from space.node.local import LocalNode
    from space.store.db import Database

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: Seconds between looks at what a stopping node's drain has left.
STOP_DRAIN_POLL = 2.0


def register(sub: Any) -> None:
    """Add `up`, `api`, `controller`, `node` and `doctor` to the `space` parser."""
    server_flags(
        add_command(sub, "up", cmd_up, "API, controller and node in one process"), listen=True
    )
    server_flags(add_command(sub, "api", cmd_api, "an API replica (no node)"), listen=True)
    server_flags(add_command(sub, "controller", cmd_controller, "the reconciler"), listen=False)
    node = add_command(sub, "node", cmd_node, "this host's node worker served over HTTP")
    node.add_argument("--data-dir", help="state directory (SPACE_DATA_DIR)")
    node.add_argument("--host", dest="node_host", help="listen host (SPACE_NODE_LISTEN)")
    node.add_argument("--port", dest="node_port", type=int, help="listen port (SPACE_NODE_LISTEN)")
    doctor = add_command(sub, "doctor", cmd_doctor, "check this host for `space up`")
    doctor.add_argument(
        "--no-boot-probe", action="store_true", help="skip booting the guest to time KVM vs TCG"
    )
    doctor.add_argument("--cache-dir", help="SPACE_CACHE_DIR")
    server_flags(doctor, listen=False)
    json_flag(doctor)


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


def _leave(db: Database, settings: Settings) -> None:
    """Tell the cluster this node is gone now (`lost`), not after its silence."""
    from space.control.registry import NodeIdentity
    from space.store.nodes import NodeRepo

    try:
        with db.session() as session:
            NodeRepo(session).leave(NodeIdentity.of(settings.cluster).name)
    except Exception as exc:  # the database is down: its silence says it in time
        log.warning("cannot mark this node lost on the way out: %s", exc)


@asynccontextmanager
async def _hosted_node(settings: Settings) -> AsyncIterator[tuple[LocalNode, Database]]:
    """This host's node, open and registered (heartbeating) while the block runs, and the
    database it registers in; closed after (SIGTERM/SIGINT held until then), its
    sandboxes' VMs left for the next start to adopt."""
    from space.api.bootstrap import open_database
    from space.control.registry import keep_registered

    db = open_database(settings)
    node = local_node_of(settings)
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
            await asyncio.to_thread(_leave, db, settings)
            db.dispose()
            log.info("node closed and marked lost; sandboxes' VMs left for adoption")


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
        node = node_of(settings, db)
        await node.open()
        try:
            await _serve_api(settings, node, db, reconcile=False)
        finally:
            await node.aclose()
    finally:
        db.dispose()


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
    from space.services.credentials import CredentialService

    db = open_database(settings)
    try:
        CredentialService(settings, db).check_keys()  # the cluster's key files, or none
        node = node_of(settings, db)
    except (NodeTokenError, KeyFileError):
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
    from space.control.builds import BuildLimits
    from space.control.controller import Controller
    from space.control.registry import detect_lost_nodes
    from space.services.audit_copy import AuditCopy
    from space.services.command_sweep import CommandSweep
    from space.services.credential_push import CredentialPush
    from space.services.credentials import CredentialService

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
            CommandSweep(db, node, timeout, grace=timeout),
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

    async with _hosted_node(settings) as (node, db):
        app = create_node_app(node, gate, settings.node_link, metrics=node.metrics.registry)
        out(f"SPACE node listening on http://{listen[0]}:{listen[1]}")
        drain = settings.node_link.drain_seconds  # process streams last as long as the process
        before_stop = (
            partial(_drain_away, db, settings) if settings.node.on_stop == "drain" else None
        )
        await _uvicorn_at(
            app, listen, ws_max_size=WS_MAX_FRAME, drain=drain, before_stop=before_stop
        )


async def _drain_away(db: Database, settings: Settings) -> None:
    """`SPACE_NODE_ON_STOP=drain`: go `draining` and wait, still serving, until nothing
    movable is placed here (the leading controller moves it), or `stop_drain_seconds`."""
    from space.control.drain import MOVABLE
    from space.control.registry import NodeIdentity
    from space.store.nodes import NodeRepo, NodeState
    from space.store.placements import PlacementRepo

    name = NodeIdentity.of(settings.cluster).name

    def left() -> list[str]:
        with db.session() as session:
            placed = PlacementRepo(session).left_on(name)
        return [sandbox_id for sandbox_id, state, _why in placed if state in MOVABLE]

    def start() -> None:
        with db.session() as session:
            NodeRepo(session).set_state(name, NodeState.DRAINING)

    try:
        await asyncio.to_thread(start)
        async with asyncio.timeout(settings.node.stop_drain_seconds):
            while waiting := await asyncio.to_thread(left):
                log.info("stopping: %d sandbox(es) still to move off this node", len(waiting))
                await asyncio.sleep(STOP_DRAIN_POLL)
        log.info("stopping: drained, nothing left on this node")
    except TimeoutError:
        log.warning(
            "stopping: the drain did not end in time; left: %s", await asyncio.to_thread(left)
        )
    except Exception as exc:  # the database is down, or the node is lost already: leave
        log.warning("stopping without a drain: %s", exc)


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
    app: Any,
    listen: tuple[str, int],
    *,
    ws_max_size: int,
    drain: int | None = None,
    before_stop: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT; `before_stop` first runs to its end, still serving
    (a second signal stops at once)."""
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

    class Server(uvicorn.Server):
        stopping: asyncio.Task[None] | None = None

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            if before_stop is None or self.stopping is not None:
                super().handle_exit(sig, frame)
            else:  # a signal handler runs on the loop's thread, between its steps
                self.stopping = asyncio.get_running_loop().create_task(self.then(sig, frame))

        async def then(self, sig: int, frame: FrameType | None) -> None:
            try:
                assert before_stop is not None
                await before_stop()
            finally:
                super().handle_exit(sig, frame)

    await Server(config).serve()
