"""`space templates build|ls|rm`: an org's templates from recipes, through
`/v1/templates` at `SPACE_API_URL` with `SPACE_API_KEY`; and the operator's
`space template ls|import|build`, which act on this host's template cache instead
(`SPACE_CACHE_DIR`, at the end of this module).

`build` sends the recipe and every file under `--context` (inline, base64), then
follows the build's event stream, printing its log to stdout and, on a terminal, a
redrawn progress line (elapsed time, state; its place in the queue while it waits) on
stderr; a broken stream is re-attached with `Last-Event-ID`. It exits 0 when the
template is ready, 1 when the build failed or was cancelled.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any, TextIO

import httpx

from space.cli.common import add_command, json_flag, pairs, settings_from
from space.cli.output import BuildProgress, err, out, table
from space.sdk import TransportError
from space.sdk._exceptions import converted, raise_for
from space.sdk._models import Connection

#: The server's bounds, checked before anything is sent.
MAX_RECIPE_BYTES = 1 << 20
MAX_CONTEXT_FILES = 1000
MAX_CONTEXT_BYTES = 16 << 20
RECONNECTS = 5
TIMEOUT = httpx.Timeout(60.0, connect=10.0)
#: An event stream silent this long (the server sends keep-alives) is re-attached.
STREAM_IDLE_SECONDS = 120.0


def register(sub: Any) -> None:
    """Add `templates` to the `space` parser."""
    group = sub.add_parser("templates", help="templates from recipes (via SPACE_API_URL)")
    verbs = group.add_subparsers(dest="templates_cmd", required=True)
    build = add_command(verbs, "build", cmd_build, "build a template from a Dockerfile")
    build.add_argument("name", help="[a-z0-9][a-z0-9-]{0,62}")
    build.add_argument("-f", "--file", type=Path, default=Path("Dockerfile"), help="the recipe")
    build.add_argument("--context", type=Path, help="directory whose files COPY/ADD may use")
    build.add_argument("--start-cmd", help="runs when the base snapshot is taken")
    build.add_argument("--ready-cmd", help="the snapshot waits until this exits 0")
    build.add_argument("--arg", action="append", metavar="KEY=VALUE", help="an ARG value")
    build.add_argument("--memory-mb", type=int, help="the build VM's memory (default 512)")
    build.add_argument("--disk-mb", type=int, help="grow the template's disk to this")
    json_flag(add_command(verbs, "ls", cmd_ls, "list the templates this org can use"))
    remove = add_command(verbs, "rm", cmd_rm, "delete templates this org built")
    remove.add_argument("names", nargs="+")


def read_recipe(path: Path) -> str:
    """The recipe file's text (SystemExit past the server's bound)."""
    with path.open("rb") as file:
        data = file.read(MAX_RECIPE_BYTES + 1)
    if len(data) > MAX_RECIPE_BYTES:
        raise SystemExit(f"{path}: a recipe is at most {MAX_RECIPE_BYTES} bytes")
    return data.decode()


def read_context(root: Path) -> dict[str, bytes]:
    """Every file under `root` by its path relative to it, symlinks followed while they
    stay inside it; SystemExit for one leading out, a directory loop, anything but a
    regular file, or more than the server takes."""
    base = root.resolve(strict=True)
    if not base.is_dir():
        raise SystemExit(f"--context: {root} is not a directory")
    files: dict[str, bytes] = {}
    for top, _dirs, names in os.walk(base, followlinks=True):
        if _inside(base, Path(top)) in _ancestors(base, Path(top)):
            raise SystemExit(f"--context: {top} loops back to a directory above it")
        for name in sorted(names):
            path = Path(top) / name
            files[path.relative_to(base).as_posix()] = _read_file(base, path, files)
    return files


def _ancestors(base: Path, path: Path) -> set[Path]:
    """Where each directory from `base` down to `path`'s parent really is."""
    parts = path.relative_to(base).parts
    return {(base / Path(*parts[:i])).resolve() for i in range(len(parts))}


def _inside(base: Path, path: Path) -> Path:
    real = path.resolve()
    if real != base and base not in real.parents:
        raise SystemExit(f"--context: {path} leads out of the context ({real})")
    return real


def _read_file(base: Path, path: Path, files: dict[str, bytes]) -> bytes:
    real = _inside(base, path)
    if not real.is_file():
        raise SystemExit(f"--context: {path} is not a regular file")
    if len(files) >= MAX_CONTEXT_FILES:
        raise SystemExit(f"--context: more than {MAX_CONTEXT_FILES} files")
    room = MAX_CONTEXT_BYTES - sum(len(data) for data in files.values())
    with real.open("rb") as file:
        data = file.read(room + 1)
    if len(data) > room:
        raise SystemExit(f"--context: more than {MAX_CONTEXT_BYTES >> 20} MiB in all")
    return data


def build_body(args: argparse.Namespace) -> dict[str, Any]:
    """The `POST /v1/templates` body the command line asks for."""
    context = read_context(args.context) if args.context is not None else {}
    body: dict[str, Any] = {
        "name": args.name,
        "dockerfile": read_recipe(args.file),
        "context": {path: base64.b64encode(data).decode() for path, data in context.items()},
        "args": pairs(args.arg, "--arg"),
        "start_cmd": args.start_cmd,
        "ready_cmd": args.ready_cmd,
        "memory_mb": args.memory_mb,
        "disk_mb": args.disk_mb,
    }
    return {key: value for key, value in body.items() if value is not None}


class _Api:
    """One client of the API (closed on leaving `with`), raising the SDK's errors."""

    def __init__(self) -> None:
        conn = Connection.resolve(None, None)
        self.http = httpx.Client(base_url=conn.url, headers=conn.headers, timeout=TIMEOUT)

    def __enter__(self) -> _Api:
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.close()

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        with converted():
            response = self.http.request(method, path, **kwargs)
        raise_for(response)
        return response.json() if response.content else None

    def events(self, build_id: str, after: int) -> Iterator[tuple[int, str, dict[str, Any]]]:
        """(id, event, data) of the build's events after byte `after`."""
        url = f"/v1/templates/builds/{build_id}/events"
        headers = {"Last-Event-ID": str(after)} if after else {}
        timeout = httpx.Timeout(TIMEOUT.connect, read=STREAM_IDLE_SECONDS)
        with converted(), self.http.stream("GET", url, headers=headers, timeout=timeout) as resp:
            raise_for(resp)
            yield from sse_events(resp.iter_lines())


def sse_events(lines: Iterator[str]) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """(id, event, data) at each blank line of an event stream; comments are skipped."""
    fields: dict[str, str] = {}
    for line in lines:
        if line == "":
            if "event" in fields:
                yield int(fields.get("id", "0")), fields["event"], json.loads(fields["data"])
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")


class Progress:
    """A redrawn `NAME STATE ELAPSED` line on a terminal; nothing elsewhere."""

    def __init__(self, name: str, stream: TextIO | None = None) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._live = self._stream.isatty()
        self._name = name
        self._start = time.monotonic()
        self.state = "queued"

    def clear(self) -> None:
        if self._live:
            self._stream.write("\r\x1b[K")
            self._stream.flush()

    def draw(self) -> None:
        if self._live:
            elapsed = time.monotonic() - self._start
            self._stream.write(f"\r{self._name}: {self.state} {elapsed:.0f}s\x1b[K")
            self._stream.flush()


def follow(api: _Api, build_id: str, progress: Progress) -> dict[str, Any]:
    """Print the build's log until `done` (its data), re-attaching a broken or timed-out
    stream from the last offset seen."""
    after, failures = 0, 0
    while failures <= RECONNECTS:
        try:
            for event_id, event, data in api.events(build_id, after):
                if event == "done":
                    return data
                if event == "queue":
                    _show_queue(progress, data)
                    continue
                after, failures = event_id, 0
                _print_log(progress, data["text"])
        except TransportError:
            failures += 1
    raise TransportError(f"lost the event stream of build {build_id}")


def _show_queue(progress: Progress, data: dict[str, Any]) -> None:
    position = data.get("position")
    progress.state = f"queued (#{position})" if position else str(data.get("state"))
    progress.draw()


def _print_log(progress: Progress, text: str) -> None:
    progress.clear()
    sys.stdout.write(text)
    sys.stdout.flush()
    progress.state = "building"
    progress.draw()


def cmd_build(args: argparse.Namespace) -> int:
    body = build_body(args)
    with _Api() as api:
        created = api.call("POST", "/v1/templates", json=body)
        err(f"build {created['build_id']} of {args.name} queued")
        progress = Progress(args.name)
        progress.draw()
        done = follow(api, created["build_id"], progress)
    progress.clear()
    if done["state"] != "ready":
        ended = "was cancelled" if done["state"] == "cancelled" else "failed"
        err(f"error: the build of {args.name} {ended}: {done.get('error')}")
        return 1
    err(f"template {args.name} is ready")
    return 0


def cmd_ls(args: argparse.Namespace) -> int:
    with _Api() as api:
        templates = api.call("GET", "/v1/templates")["templates"]
    if args.json:
        out(json.dumps(templates))
        return 0
    rows = [
        (t["name"], "yes" if t["owned"] else "", t["state"], len(t["versions"]) or "")
        for t in templates
    ]
    table(rows, ["NAME", "OWNED", "STATE", "VERSIONS"])
    return 0


def cmd_rm(args: argparse.Namespace) -> int:
    with _Api() as api:
        for name in args.names:
            api.call("DELETE", f"/v1/templates/{name}")
            out(name)
    return 0


# -- this host's template cache (`space template`) ---------------------------------


def register_cache(sub: Any) -> None:
    """Add `template` (this host's template cache) to the `space` parser."""
    template = sub.add_parser("template", help="templates")
    tp = template.add_subparsers(dest="template_cmd", required=True)
    ls = add_command(tp, "ls", cmd_template_ls, "list known templates (built-in and imported)")
    ls.add_argument("--cache-dir", help="SPACE_CACHE_DIR")
    json_flag(ls)
    imp = add_command(tp, "import", cmd_template_import, "import a container image as a template")
    imp.add_argument("name", help="[a-z0-9][a-z0-9-]{0,62}, not a built-in name")
    imp.add_argument(
        "source", help="oci:DIR[:TAG], oci-archive:PATH, docker-archive:PATH or docker://REF"
    )
    imp.add_argument("--cache-dir", help="SPACE_CACHE_DIR")
    json_flag(imp)
    build = add_command(tp, "build", cmd_template_build, "build templates into the cache")
    build.add_argument("names", nargs="*", help="default: base busybox")
    build.add_argument("--cache-dir", help="SPACE_CACHE_DIR")
    json_flag(build)


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
