"""The `space` command's client side: sandboxes through `space.sdk`.

`space ls|exec|shell|cp|logs` and their long forms `space sandbox ...` (with
`create`, `pause`/`resume`/`suspend`/`restore`, `rm`), against `SPACE_API_URL`
with `SPACE_API_KEY`. Tables by default, `--json` for scripts; a large copy
draws a progress bar when stderr is a terminal.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path, PurePosixPath
from typing import IO, Any

from space.cli.common import add_command, json_flag, pairs
from space.cli.output import ByteProgress, out, table
from space.cli.shell import run_shell
from space.sdk import CommandInfo, Event, Sandbox, SandboxInfo

#: Commands that also exist at the top level (`space ls` = `space sandbox ls`).
SHORT = ("ls", "exec", "shell", "cp", "logs")
CHUNK = 1 << 20
LOGS_IDLE_SECONDS = 1.0


def _show(infos: Sequence[SandboxInfo], as_json: bool) -> None:
    if as_json:
        out(json.dumps([asdict(i) for i in infos]))
        return
    rows = [(i.id, i.template, i.state, i.reason or "") for i in infos]
    table(rows, ["ID", "TEMPLATE", "STATE", "REASON"])


@contextmanager
def _connected(sandbox_id: str) -> Iterator[Sandbox]:
    """The sandbox's client, closed afterwards (the sandbox itself is left alone)."""
    sandbox = Sandbox.connect(sandbox_id)
    try:
        yield sandbox
    finally:
        sandbox.close()


def cmd_create(args: argparse.Namespace) -> int:
    sandbox = Sandbox.create(
        args.template,
        env=pairs(args.env, "--env"),
        metadata=pairs(args.metadata, "--metadata"),
        timeout=args.timeout,
    )
    sandbox.close()
    out(json.dumps(asdict(sandbox.info)) if args.json else sandbox.id)
    return 0


def cmd_ls(args: argparse.Namespace) -> int:
    _show(Sandbox.list(), args.json)
    return 0


def _argv(words: Sequence[str]) -> str | list[str]:
    """One word is a shell command line; several are an argv."""
    return words[0] if len(words) == 1 else list(words)


def cmd_exec(args: argparse.Namespace) -> int:
    """Run a command; its output streams, its exit code is ours."""
    options: dict[str, Any] = {"env": pairs(args.env, "--env"), "cwd": args.cwd}
    with _connected(args.id) as sandbox:
        if args.json:
            result = sandbox.exec(_argv(args.command), **options)
            out(json.dumps(asdict(result)))
            return result.exit_code
        return _print_events(sandbox.stream(_argv(args.command), **options))


def _print_events(events: Iterator[Event], as_json: bool = False) -> int:
    """Write stdout/stderr events to ours (or one JSON object per line); the exit code, or
    0 if the stream ended before the command did."""
    exit_code = 0
    for event in events:
        if as_json:
            out(json.dumps(_event_json(event)))
        elif event.kind != "exit":
            stream = sys.stdout if event.kind == "stdout" else sys.stderr
            stream.buffer.write(event.data)
            stream.flush()
        if event.kind == "exit":
            exit_code = event.exit_code if event.exit_code is not None else 1
    return exit_code


def _event_json(event: Event) -> dict[str, object]:
    if event.kind == "exit":
        return {"id": event.id, "kind": "exit", "exit_code": event.exit_code}
    return {"id": event.id, "kind": event.kind, "data": event.data.decode(errors="replace")}


def cmd_logs(args: argparse.Namespace) -> int:
    """A command's output so far (replayed from the server's log); `-f` follows it to
    its exit, whose code is ours. Without a command id: the sandbox's commands (with
    `-f`: the newest one, followed)."""
    with _connected(args.id) as sandbox:
        if args.command_id is None and not args.follow:
            _show_commands(sandbox.commands(), args.json)
            return 0
        command_id = args.command_id or _newest(sandbox)
        idle = None if args.follow else LOGS_IDLE_SECONDS
        return _print_events(sandbox.command(command_id).events(idle=idle), args.json)


def _newest(sandbox: Sandbox) -> str:
    commands = sandbox.commands()
    if not commands:
        raise SystemExit(f"logs: {sandbox.id} has no commands")
    return commands[0].id


def _show_commands(commands: Sequence[CommandInfo], as_json: bool) -> None:
    if as_json:
        out(json.dumps([asdict(c) for c in commands]))
        return
    rows = [
        (c.id, c.state, "" if c.exit_code is None else c.exit_code, c.created_at, _line(c.argv))
        for c in commands
    ]
    table(rows, ["ID", "STATE", "EXIT", "STARTED", "COMMAND"])


def _line(argv: dict[str, Any]) -> str:
    text = argv.get("cmd") or " ".join(argv.get("args") or ())
    return text if len(text) <= 60 else text[:59] + "…"


def cmd_shell(args: argparse.Namespace) -> int:
    with _connected(args.id) as sandbox:
        return run_shell(sandbox, _argv(args.command) if args.command else None)


def cmd_cp(args: argparse.Namespace) -> int:
    """`cp ID:/path local` downloads, `cp local ID:/path` uploads; a directory target
    (a local directory, or a remote path ending in `/`) keeps the source's name."""
    src_id, src_path = _remote(args.src)
    dst_id, dst_path = _remote(args.dst)
    if (src_id is None) == (dst_id is None):
        raise SystemExit("cp: exactly one of SRC and DST must be SANDBOX:/abs/path")
    if src_id is not None:
        target = Path(dst_path)
        if target.is_dir():
            target /= PurePosixPath(src_path).name
        with _connected(src_id) as sandbox:
            _download(sandbox, src_path, target)
    else:
        assert dst_id is not None
        if dst_path.endswith("/"):
            dst_path += Path(src_path).name
        with _connected(dst_id) as sandbox, open(src_path, "rb") as file:
            progress = ByteProgress(f"{src_path} -> {args.dst}", os.fstat(file.fileno()).st_size)
            sandbox.files.write(dst_path, _counted(file, progress))
            progress.finish()
    return 0


def _counted(file: IO[bytes], progress: ByteProgress) -> Iterator[bytes]:
    while chunk := file.read(CHUNK):
        progress.add(len(chunk))
        yield chunk


class _CountingWriter:
    def __init__(self, file: IO[bytes], progress: ByteProgress) -> None:
        self._file = file
        self._progress = progress

    def write(self, data: bytes) -> int:
        self._progress.add(len(data))
        return self._file.write(data)


def _download(sandbox: Sandbox, path: str, target: Path) -> None:
    """Stream into a temporary file beside `target`, renamed on success: a failed
    download leaves no file behind."""
    fd, partial = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    progress = ByteProgress(f"{sandbox.id}:{path} -> {target}", None)
    try:
        with os.fdopen(fd, "wb") as file:
            sandbox.files.download(path, _CountingWriter(file, progress))
        progress.finish()
        os.chmod(partial, 0o666 & ~_umask())
        os.replace(partial, target)
    finally:
        Path(partial).unlink(missing_ok=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _remote(spec: str) -> tuple[str | None, str]:
    head, sep, tail = spec.partition(":")
    if sep and tail.startswith("/") and "/" not in head:
        return head, tail
    return None, spec


POWER: dict[str, Callable[[Sandbox], SandboxInfo]] = {
    "pause": Sandbox.pause,
    "resume": Sandbox.resume,
    "suspend": Sandbox.suspend,
    "restore": Sandbox.restore,
}


def cmd_power(args: argparse.Namespace) -> int:
    with _connected(args.id) as sandbox:
        info = POWER[args.op](sandbox)
    out(json.dumps(asdict(info)) if args.json else f"{info.id} {info.state}")
    return 0


def cmd_rm(args: argparse.Namespace) -> int:
    for sandbox_id in args.ids:
        with _connected(sandbox_id) as sandbox:
            sandbox.kill()
    out(json.dumps({"deleted": args.ids}) if args.json else "\n".join(args.ids))
    return 0


# -- parsers -----------------------------------------------------------------------


def add_short_commands(sub: Any) -> None:
    """`space ls|exec|shell|cp|logs`."""
    json_flag(add_command(sub, "ls", cmd_ls, "list sandboxes"))
    run = add_command(sub, "exec", cmd_exec, "run a command, stream its output, exit with its code")
    run.add_argument("id")
    run.add_argument("command", nargs="+", help="one shell string, or argv after --")
    run.add_argument("--env", action="append", metavar="KEY=VALUE")
    run.add_argument("--cwd", help="working directory in the sandbox")
    json_flag(run)
    shell = add_command(sub, "shell", cmd_shell, "an interactive terminal in a sandbox")
    shell.add_argument("id")
    shell.add_argument("command", nargs="*", help="default: a login shell (bash, else sh)")
    copy = add_command(sub, "cp", cmd_cp, "copy a file: SANDBOX:/path <-> local path")
    copy.add_argument("src")
    copy.add_argument("dst")
    logs = add_command(sub, "logs", cmd_logs, "a command's output (replayed); -f follows it")
    logs.add_argument("id")
    logs.add_argument(
        "command_id", nargs="?", help="default: list the commands (-f: follow the newest)"
    )
    logs.add_argument("-f", "--follow", action="store_true", help="until the command exits")
    json_flag(logs)


def add_sandbox_commands(sub: Any) -> None:
    """`space sandbox create|ls|exec|shell|cp|logs|pause|resume|suspend|restore|rm`."""
    create = add_command(sub, "create", cmd_create, "create a sandbox and print its id")
    create.add_argument("--template", default="base")
    create.add_argument("--env", action="append", metavar="KEY=VALUE")
    create.add_argument("--metadata", action="append", metavar="KEY=VALUE")
    create.add_argument("--timeout", type=int, help="lifetime in seconds")
    json_flag(create)
    add_short_commands(sub)
    for op in POWER:
        power = add_command(sub, op, cmd_power, f"{op} a sandbox")
        power.add_argument("id")
        power.set_defaults(op=op)
        json_flag(power)
    remove = add_command(sub, "rm", cmd_rm, "delete sandboxes")
    remove.add_argument("ids", nargs="+")
    json_flag(remove)
