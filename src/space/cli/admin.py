"""`space nodes ls|cordon|uncordon|drain`: the node registry, read and steered through
the database (`SPACE_DATABASE_URL`, or the data dir's SQLite).

`cordon` marks a node closed to new sandboxes, `drain` marks it draining (closed, and
the leading `space controller` moves its sandboxes off through the shared snapshot
store: `space.control.drain`), `uncordon` returns it to `ready`. A node goes `lost` by itself
when its heartbeat stops, and back to `ready` when it is heard again.
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from typing import Any

from space.cli.command import _command, _json_flag, _server_flags, settings_from
from space.cli.output import err, out, table
from space.private import private_umask
from space.store.db import Database
from space.store.nodes import NodeInfo, NodeRepo, NodeState

VERBS = {
    "cordon": (NodeState.CORDONED, "keep new sandboxes off a node"),
    "uncordon": (NodeState.READY, "make a cordoned or draining node ready again"),
    "drain": (NodeState.DRAINING, "mark a node draining: its sandboxes to move off"),
}


def register(sub: Any) -> None:
    """Add `nodes` and its subcommands to the `space` parser."""
    nodes = sub.add_parser("nodes", help="the node registry")
    verbs = nodes.add_subparsers(dest="nodes_cmd", required=True)
    listing = _command(verbs, "ls", cmd_nodes_ls, "list nodes: state, capacity, heartbeat")
    _json_flag(listing)
    _server_flags(listing, listen=False)
    for verb, (_state, help_text) in VERBS.items():
        parser = _command(verbs, verb, cmd_nodes_set, help_text)
        parser.add_argument("names", nargs="+", metavar="NAME")
        parser.set_defaults(verb=verb)
        _json_flag(parser)
        _server_flags(parser, listen=False)


def _database(args: argparse.Namespace) -> Database:
    from space.api.bootstrap import open_database

    private_umask()  # a SQLite database this opens first is private from the start
    return open_database(settings_from(args))


def cmd_nodes_ls(args: argparse.Namespace) -> int:
    db = _database(args)
    try:
        with db.session() as session:
            repo = NodeRepo(session)
            nodes, now = repo.all(), repo.now()
    finally:
        db.dispose()
    if args.json:
        out(json.dumps([_node_json(node) for node in nodes]))
        return 0
    rows = [
        (
            n.name,
            n.address,
            n.state.value,
            n.capacity.cpus,
            _gib(n.capacity.memory_bytes),
            _gib(n.capacity.disk_free_bytes),
            n.capacity.sandboxes,
            " ".join(f"{t}={p.ready}/{p.target}" for t, p in sorted(n.capacity.warm_pools.items())),
            f"{_age(n.heartbeat_at, now)} ago",
        )
        for n in nodes
    ]
    headers = ["NAME", "ADDRESS", "STATE", "CPUS", "MEMORY", "DISK FREE", "SANDBOXES", "WARM"]
    table(rows, [*headers, "HEARTBEAT"])
    return 0


def cmd_nodes_set(args: argparse.Namespace) -> int:
    from space.store.errors import StoreError

    target, _help = VERBS[args.verb]
    db = _database(args)
    changed: list[NodeInfo] = []
    try:
        for name in args.names:
            try:
                with db.session() as session:
                    changed.append(NodeRepo(session).set_state(name, target))
            except StoreError as exc:
                err(f"error: {exc}")
                return 1
    finally:
        db.dispose()
    if args.json:
        out(json.dumps([_node_json(node) for node in changed]))
    else:
        for node in changed:
            out(f"{node.name} {node.state.value}")
    return 0


def _node_json(node: NodeInfo) -> dict[str, object]:
    return {
        "id": node.id,
        "name": node.name,
        "address": node.address,
        "state": node.state.value,
        "capacity": node.capacity.to_json(),
        "heartbeat_at": node.heartbeat_at.isoformat(),
    }


def _gib(size: int) -> str:
    return f"{size / 1024**3:.1f}G"


def _age(then: datetime, now: datetime) -> str:
    seconds = max(0, int((now - then).total_seconds()))
    return f"{seconds}s" if seconds < 120 else f"{seconds // 60}m"
