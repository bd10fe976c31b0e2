"""The `space` command: its argparse tree and `main()`.

Server side (`up`, `api`, `controller`, `node`, `doctor`: `serve`; `keys`, `nodes`:
`admin`; `audit`; `template`) reads the same settings as the server (`SPACE_*`);
client side (`sandbox`, `ls`, `exec`, `shell`, `cp`, `logs`: `client`; `credentials`;
`templates`) talks to the API (`SPACE_API_URL`, `SPACE_API_KEY`). Human tables by
default, `--json` for scripts.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Sequence

from space.cli import admin, credentials, serve, templates
from space.cli.client import SHORT, add_sandbox_commands, add_short_commands
from space.cli.common import Handler
from space.cli.output import err
from space.credentials.crypto import KeyFileError
from space.private import private_umask
from space.sdk import SpaceError, TransportError

# Processes that write server state, so run with umask 077.
SERVER_COMMANDS = frozenset({"up", "api", "controller", "node", "keys", "audit"})
CLIENT_COMMANDS = frozenset({"sandbox", "credentials", "templates", *SHORT})


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="space", description="SPACE microVM sandboxes")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="group", required=True)  # `command`: exec's argv
    serve.register(sub)  # up, api, controller, node, doctor
    admin.register(sub)  # keys, nodes
    credentials.register(sub)  # credentials, audit
    templates.register(sub)
    sandbox = sub.add_parser("sandbox", help="sandboxes (via SPACE_API_URL/SPACE_API_KEY)")
    add_sandbox_commands(sandbox.add_subparsers(dest="sandbox_cmd", required=True))
    add_short_commands(sub)
    templates.register_cache(sub)  # template
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
    except KeyFileError as exc:  # a server's credential keys: unsafe, or not the cluster's
        err(f"error: {exc}")
        return 2
    except (SpaceError, OSError) as exc:
        err(f"error: {exc}")
        return 1
    except KeyboardInterrupt:
        return 130
