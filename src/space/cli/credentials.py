"""`space credentials add|ls|rotate|revoke` (client side, through `/v1/credentials` at
`SPACE_API_URL` with `SPACE_API_KEY`) and `space audit verify` (operator side: the
audit's JSON-lines file and the database's chain).

A value is read from `--value-file` or standard input (without echo on a terminal),
never from the command line, where other users' `ps` and the shell history see it.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from space.cli.common import add_command, json_flag, server_flags, settings_from
from space.cli.output import err, out, table
from space.credentials.audit import AuditFile, AuditFileError, verify
from space.credentials.model import MAX_VALUE_BYTES
from space.sdk import Call, Calls, CredentialInfo, Credentials


def register(sub: Any) -> None:
    """Add `credentials` and `audit` to the `space` parser."""
    group = sub.add_parser("credentials", help="credentials (via SPACE_API_URL/SPACE_API_KEY)")
    verbs = group.add_subparsers(dest="credentials_cmd", required=True)
    add = _exact(verbs, "add", cmd_add, "store a credential (value from stdin or a file)")
    add.add_argument("name", help="e.g. GITHUB_TOKEN")
    add.add_argument("--host", action="append", required=True, help="host or *.domain")
    add.add_argument("--method", action="append", help="default: every method")
    add.add_argument("--path", action="append", help="path prefix (default /)")
    add.add_argument("--kind", choices=("header", "basic", "placeholder"), default="header")
    add.add_argument("--header", default="Authorization")
    add.add_argument("--template", default="Bearer {value}", help="for --kind header")
    add.add_argument("--user", help="for --kind basic")
    add.add_argument("--application", help="the application as JSON (any kind)")
    add.add_argument("--scope", choices=("org", "project", "template", "sandbox"), default="org")
    add.add_argument("--target", help="project name, template name or sandbox id")
    add.add_argument("--expires-in", type=int, metavar="SECONDS")
    add.add_argument("--rps", type=float, help="rate limit: requests per second")
    add.add_argument("--burst", type=int, help="rate limit: bucket size")
    add.add_argument("--value-file", type=Path, help="default: read standard input")
    json_flag(add)
    json_flag(add_command(verbs, "ls", cmd_ls, "list credentials (never their values)"))
    rotate = _exact(verbs, "rotate", cmd_rotate, "a new value (stdin or a file)")
    rotate.add_argument("id")
    rotate.add_argument("--grace", type=int, default=0, help="seconds the old value stays usable")
    rotate.add_argument("--value-file", type=Path, help="default: read standard input")
    json_flag(rotate)
    revoke = add_command(verbs, "revoke", cmd_revoke, "revoke a credential at once")
    revoke.add_argument("id")
    json_flag(revoke)

    audit = sub.add_parser("audit", help="the credential audit")
    audit_verbs = audit.add_subparsers(dest="audit_cmd", required=True)
    check = add_command(audit_verbs, "verify", cmd_audit_verify, "check the hash chain")
    check.add_argument("--file", type=Path, help="default: SPACE_CREDENTIALS_AUDIT_FILE")
    server_flags(check, listen=False)


def _exact(sub: Any, name: str, handler: Any, help_text: str) -> argparse.ArgumentParser:
    """A command whose options are never abbreviated: `--value SECRET` must not be taken
    for `--value-file`."""
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help_text, allow_abbrev=False)
    parser.set_defaults(handler=handler)
    return parser


def _read_value(path: Path | None) -> str:
    if path is not None:
        with open(path) as file:
            text = file.read(MAX_VALUE_BYTES + 2)
    elif sys.stdin.isatty():
        text = getpass.getpass("value: ")
    else:
        text = sys.stdin.read(MAX_VALUE_BYTES + 2)  # more is refused by the API
    value = text[:-1] if text.endswith("\n") else text
    if not value:
        raise SystemExit("error: the value is empty")
    return value


def _send(call: Call[CredentialInfo]) -> list[dict[str, Any]]:
    with Credentials() as client:
        return [asdict(client.send(call))]


def _application(args: argparse.Namespace) -> dict[str, Any]:
    if args.application:
        parsed: dict[str, Any] = json.loads(args.application)
        return parsed
    if args.kind == "basic":
        if not args.user:
            raise SystemExit("error: --kind basic needs --user")
        return {"kind": "basic", "user": args.user}
    if args.kind == "placeholder":
        return {"kind": "placeholder", "header": args.header}
    return {"kind": "header", "header": args.header, "template": args.template}


def _binding(args: argparse.Namespace) -> dict[str, Any]:
    """`Calls.create`'s binding keywords."""
    limited = args.rps is not None or args.burst is not None
    return {
        "hosts": args.host,
        "methods": [m.upper() for m in args.method] if args.method else None,
        "path_prefixes": args.path or None,
        "rate_limit": {"rps": args.rps, "burst": args.burst} if limited else None,
    }


def _show(credentials: list[dict[str, Any]], as_json: bool) -> None:
    """`credentials` as `CredentialInfo` fields (`--json`: as they are)."""
    if as_json:
        out(json.dumps(credentials))
        return
    rows = [
        (
            c["id"],
            c["name"],
            c["scope"] + (f":{c['target']}" if c["target"] else ""),
            c["kind"],
            ",".join(c["binding"]["hosts"]) if c["binding"] else "(per sandbox)",
            c["version"],
            c["fingerprint"],
            c["status"],
        )
        for c in credentials
    ]
    table(rows, ["ID", "NAME", "SCOPE", "KIND", "HOSTS", "VERSION", "FINGERPRINT", "STATUS"])


def cmd_add(args: argparse.Namespace) -> int:
    call = Calls.create(
        args.name,
        _read_value(args.value_file),
        scope=args.scope,
        target=args.target,
        application=_application(args),
        expires_in=args.expires_in,
        **_binding(args),
    )
    _show(_send(call), args.json)
    return 0


def cmd_ls(args: argparse.Namespace) -> int:
    with Credentials() as client:
        _show([asdict(c) for c in client.list()], args.json)
    return 0


def cmd_rotate(args: argparse.Namespace) -> int:
    _show(_send(Calls.rotate(args.id, _read_value(args.value_file), args.grace)), args.json)
    return 0


def cmd_revoke(args: argparse.Namespace) -> int:
    _show(_send(Calls.revoke(args.id)), args.json)
    return 0


def cmd_audit_verify(args: argparse.Namespace) -> int:
    """Exit 0 if both chains hold; 1 naming the first broken seq of each that does not."""
    from space.api.bootstrap import open_database
    from space.store.credential_audit import AuditRepo

    settings = settings_from(args)
    path = args.file or settings.credentials.audit_path(settings.data_dir)
    try:
        broken_file = verify(AuditFile(path).records())
    except AuditFileError as exc:
        err(f"error: {exc}")
        return 1
    db = open_database(settings)
    try:
        with db.session() as session:
            broken_db = verify(AuditRepo(session).walk())
    finally:
        db.dispose()
    failed = False
    for where, broken in ((f"file {path}", broken_file), ("database", broken_db)):
        if broken is None:
            out(f"audit chain holds: {where}")
        else:
            err(f"audit chain broken at seq {broken}: {where}")
            failed = True
    return 1 if failed else 0
