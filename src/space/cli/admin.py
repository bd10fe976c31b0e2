"""The operator's commands straight on the database (`SPACE_DATABASE_URL`, or the data
dir's SQLite): `space keys create|list|revoke` and
`space nodes ls|sandboxes|cordon|uncordon|drain|forget`.

A key's value is shown once, at `create`; `list` and `revoke` show ids and prefixes.
`cordon` marks a node closed to new sandboxes, `drain` marks it draining (closed, and
the leading `space controller` moves its sandboxes off through the shared snapshot
store: `space.control.drain`), `uncordon` returns it to `ready`. A node goes `lost` when it
stops (it says so) or its heartbeat does, and back to `ready` when it is heard again;
`forget` declares a lost node gone for good (its sandboxes fail, its suspended ones
restore elsewhere). `sandboxes` shows where sandboxes are placed: the operator's view
(no API key shows a node, so a tenant cannot map which of its sandboxes share a host).
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from space.cli.common import add_command, json_flag, server_flags, settings_from
from space.cli.output import err, out, table
from space.private import private_umask
from space.store.db import Database
from space.store.nodes import NodeInfo, NodeRepo, NodeState

if TYPE_CHECKING:
    from space.store.keys import KeyInfo

#: Seconds between looks at what a drain has left.
DRAIN_POLL = 2.0
LEFT_HEADERS = ["SANDBOX", "STATE", "NODE", "LAST FAILED MOVE"]

VERBS = {
    "cordon": (NodeState.CORDONED, "keep new sandboxes off a node"),
    "uncordon": (NodeState.READY, "make a cordoned or draining node ready again"),
    "drain": (NodeState.DRAINING, "mark a node draining: its sandboxes to move off"),
}


def register(sub: Any) -> None:
    """Add `keys` and `nodes` to the `space` parser."""
    keys = sub.add_parser("keys", help="API keys").add_subparsers(dest="keys_cmd", required=True)
    create_key = add_command(keys, "create", cmd_keys_create, "make an API key")
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
    json_flag(create_key)
    server_flags(create_key, listen=False)
    list_keys = add_command(keys, "list", cmd_keys_list, "list keys by id and prefix (no values)")
    list_keys.add_argument("--org", help="only this org's keys")
    json_flag(list_keys)
    server_flags(list_keys, listen=False)
    revoke = add_command(keys, "revoke", cmd_keys_revoke, "revoke keys by id, effective at once")
    revoke.add_argument("ids", nargs="+", metavar="ID")
    json_flag(revoke)
    server_flags(revoke, listen=False)

    nodes = sub.add_parser("nodes", help="the node registry")
    verbs = nodes.add_subparsers(dest="nodes_cmd", required=True)
    listing = add_command(verbs, "ls", cmd_nodes_ls, "list nodes: state, capacity, heartbeat")
    json_flag(listing)
    server_flags(listing, listen=False)
    for verb, (_state, help_text) in VERBS.items():
        parser = add_command(verbs, verb, cmd_nodes_set, help_text)
        parser.add_argument("names", nargs="+", metavar="NAME")
        parser.set_defaults(verb=verb)
        json_flag(parser)
        server_flags(parser, listen=False)
        if verb == "drain":
            parser.add_argument(
                "--wait",
                type=_positive_seconds,
                metavar="SECONDS",
                help="then wait (at most SECONDS) until nothing movable is left on them;"
                " exit 1 naming what is left and why its last move failed",
            )
    placed = add_command(verbs, "sandboxes", cmd_nodes_sandboxes, "the sandboxes on nodes")
    placed.add_argument("names", nargs="*", metavar="NAME", help="these nodes (default: all)")
    json_flag(placed)
    server_flags(placed, listen=False)
    forget = add_command(verbs, "forget", cmd_nodes_forget, "declare lost nodes gone for good")
    forget.add_argument("names", nargs="+", metavar="NAME")
    server_flags(forget, listen=False)


# -- keys ------------------------------------------------------------------------


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


def _positive_seconds(value: str) -> int:
    if not value.isdigit() or int(value) <= 0:
        raise argparse.ArgumentTypeError(f"{value!r} is not a positive number of seconds")
    return int(value)


# -- nodes -----------------------------------------------------------------------


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
    if getattr(args, "wait", None):
        return _drained(args, args.wait)
    return 0


def _drained(args: argparse.Namespace, seconds: float) -> int:
    """Wait until no movable sandbox is left on the nodes (the leading controller moves
    them); 1 and what is left, with why its last move failed, if some are at the end."""
    from space.control.drain import MOVABLE
    from space.store.placements import PlacementRepo

    db = _database(args)
    deadline = time.monotonic() + seconds
    shown = -1
    try:
        while True:
            with db.session() as session:
                placed = PlacementRepo(session).left_on
                left = [(s, st, n, why) for n in args.names for s, st, why in placed(n)]
            left = [row for row in left if row[1] in MOVABLE]
            if not left:
                err(f"drained: nothing left on {', '.join(args.names)}")
                return 0
            if len(left) != shown:
                shown = len(left)
                err(f"{shown} sandbox(es) left on {', '.join(args.names)}")
            if time.monotonic() >= deadline:
                break
            time.sleep(min(DRAIN_POLL, max(0.0, deadline - time.monotonic())))
    finally:
        db.dispose()
    err(f"error: the drain did not end within {seconds:.0f}s; left:")
    table([(s, st, n, why or "not tried yet") for s, st, n, why in left], LEFT_HEADERS)
    return 1


def cmd_nodes_sandboxes(args: argparse.Namespace) -> int:
    from space.store.placements import PlacementRepo

    db = _database(args)
    try:
        with db.session() as session:
            names = args.names or [node.name for node in NodeRepo(session).all()]
            placed = PlacementRepo(session).left_on
            rows = [(sid, st, name, why) for name in names for sid, st, why in placed(name)]
    finally:
        db.dispose()
    if args.json:
        listed = [{"id": s, "state": st, "node": n, "move_error": why} for s, st, n, why in rows]
        out(json.dumps(listed))
    else:
        table([(s, st, n, why or "") for s, st, n, why in rows], LEFT_HEADERS)
    return 0


def cmd_nodes_forget(args: argparse.Namespace) -> int:
    from space.store.errors import StoreError

    db = _database(args)
    try:
        for name in args.names:
            try:
                with db.session() as session:
                    NodeRepo(session).forget(name)
            except StoreError as exc:
                err(f"error: {exc}")
                return 1
            out(f"{name} forgotten")
    finally:
        db.dispose()
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
