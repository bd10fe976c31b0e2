"""What the `space` command's modules share: the handler type, the argparse helpers
every group builds its commands with, the settings a server-side command reads, and
`KEY=VALUE` flags."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from space.config import Settings
from space.config.server import ServerConfig

Handler = Callable[[argparse.Namespace], int]


def settings_from(args: argparse.Namespace) -> Settings:
    overrides: dict[str, Any] = {}
    for name in ("data_dir", "cache_dir"):
        if getattr(args, name, None):
            overrides[name] = Path(getattr(args, name))
    server = {k: getattr(args, k) for k in ("host", "port") if getattr(args, k, None) is not None}
    if server:
        overrides["server"] = ServerConfig(**server)
    return Settings(**overrides)


def add_command(sub: Any, name: str, handler: Handler, help_text: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help_text)
    parser.set_defaults(handler=handler)
    return parser


def json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def server_flags(parser: argparse.ArgumentParser, *, listen: bool) -> None:
    parser.add_argument("--data-dir", help="state directory (SPACE_DATA_DIR)")
    if listen:
        parser.add_argument("--host", help="listen address (default 127.0.0.1)")
        parser.add_argument("--port", type=int, help="listen port (default 8080)")


def pairs(values: Sequence[str] | None, flag: str) -> dict[str, str]:
    result: dict[str, str] = {}
    for item in values or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"{flag} expects KEY=VALUE, got {item!r}")
        result[key] = value
    return result
