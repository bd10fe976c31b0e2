"""`space templates build|ls|rm` against a real uvicorn server over FakeNode (its
controller's runner takes each build to the end in the background)."""

from __future__ import annotations

import argparse
import io
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from space.cli import main
from space.cli import templates as cli_templates
from space.sdk import TransportError
from tests.conftest import ServerThread
from tests.control.fakes import FakeNode


@pytest.fixture
def client_env(
    server: ServerThread, make_key: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPACE_API_URL", server.url)
    monkeypatch.setenv("SPACE_API_KEY", make_key("acme"))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "Dockerfile").write_text("FROM base\nCOPY . /app/\nRUN true\n")
    context = tmp_path / "ctx"
    (context / "src").mkdir(parents=True)
    (context / "app.py").write_bytes(b"print(1)\n")
    (context / "src" / "lib.py").write_bytes(b"\x00\xff")
    return tmp_path


@pytest.mark.usefixtures("client_env")
def test_build_prints_the_log_and_exits_0_when_ready(
    project: Path, fake_node: FakeNode, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["templates", "build", "-f", str(project / "Dockerfile"), "myapp"]
    argv += ["--context", str(project / "ctx"), "--arg", "V=1", "--start-cmd", "serve"]
    assert main([*argv, "--memory-mb", "1024", "--disk-mb", "2048"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "FROM base\nRUN true\n"
    assert "template myapp is ready" in captured.err
    (spec,) = fake_node.builds.values()
    assert spec.context == {"app.py": b"print(1)\n", "src/lib.py": b"\x00\xff"}
    assert (spec.args, spec.start_cmd, spec.memory_mib, spec.disk_mb) == (
        {"V": "1"},
        "serve",
        1024,
        2048,
    )

    assert main(["templates", "ls"]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert listing[0].split() == ["NAME", "OWNED", "STATE", "VERSIONS"]
    assert ["myapp", "yes", "ready", "1"] in [line.split() for line in listing]
    assert main(["templates", "rm", "myapp"]) == 0
    assert "myapp" not in fake_node.built


@pytest.mark.usefixtures("client_env")
def test_a_failed_build_exits_1_with_its_error(
    project: Path, fake_node: FakeNode, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_node.fail_build = "line 3: RUN exited 1"
    argv = ["templates", "build", "-f", str(project / "Dockerfile"), "myapp"]
    assert main([*argv, "--context", str(project / "ctx")]) == 1
    assert "line 3: RUN exited 1" in capsys.readouterr().err


@pytest.mark.usefixtures("client_env")
def test_a_refused_build_exits_1_with_the_servers_message(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["templates", "build", "-f", str(project / "Dockerfile"), "base"]
    assert main([*argv, "--context", str(project / "ctx")]) == 1
    assert "template_name_taken" in capsys.readouterr().err
    argv = ["templates", "build", "-f", str(project / "Dockerfile"), "myapp"]
    assert main(argv) == 1  # COPY . of an empty context: refused before it is queued
    assert "422 invalid_recipe: dockerfile: line 2: '.' is not in" in capsys.readouterr().err


def test_a_symlink_inside_the_context_is_read(project: Path) -> None:
    os.symlink("app.py", project / "ctx" / "alias.py")
    os.symlink("src", project / "ctx" / "again")
    files = cli_templates.read_context(project / "ctx")
    assert files["alias.py"] == files["app.py"]
    assert files["again/lib.py"] == files["src/lib.py"]


@pytest.mark.parametrize(
    "make",
    [
        lambda ctx: os.symlink("/etc/hostname", ctx / "out"),
        lambda ctx: os.symlink("/etc", ctx / "outdir"),
        lambda ctx: os.symlink("..", ctx / "src" / "loop"),
        lambda ctx: os.symlink("missing", ctx / "dangling"),
        lambda ctx: os.mkfifo(ctx / "fifo"),
    ],
)
def test_the_context_refuses_what_it_cannot_send_whole(
    project: Path, make: Callable[[Path], None]
) -> None:
    make(project / "ctx")
    with pytest.raises(SystemExit):
        cli_templates.read_context(project / "ctx")


def test_the_context_is_bounded(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_templates, "MAX_CONTEXT_FILES", 1)
    with pytest.raises(SystemExit, match="more than 1 files"):
        cli_templates.read_context(project / "ctx")
    monkeypatch.setattr(cli_templates, "MAX_CONTEXT_FILES", 1000)
    monkeypatch.setattr(cli_templates, "MAX_CONTEXT_BYTES", 10)
    with pytest.raises(SystemExit, match="MiB in all"):
        cli_templates.read_context(project / "ctx")


def test_the_body_leaves_out_what_is_not_given(project: Path) -> None:
    args = argparse.Namespace(
        name="myapp",
        file=project / "Dockerfile",
        context=None,
        arg=None,
        start_cmd=None,
        ready_cmd=None,
        memory_mb=None,
        disk_mb=None,
    )
    body = cli_templates.build_body(args)
    assert body == {"name": "myapp", "dockerfile": (project / "Dockerfile").read_text()} | {
        "context": {},
        "args": {},
    }


def test_sse_events_skip_comments() -> None:
    lines = iter(["id: 4", "event: log", 'data: {"text": "abcd"}', "", ": keepalive", ""])
    assert list(cli_templates.sse_events(lines)) == [(4, "log", {"text": "abcd"})]


class _Flaky:
    """Breaks its first stream after one event; the next attach starts after it."""

    def __init__(self) -> None:
        self.attached: list[int] = []

    def events(self, build_id: str, after: int) -> Iterator[tuple[int, str, dict[str, Any]]]:
        self.attached.append(after)
        if len(self.attached) == 1:
            yield 0, "queue", {"position": 2, "state": "queued"}
            yield 0, "queue", {"position": None, "state": "building"}
            yield 3, "log", {"text": "ab\n"}
            raise TransportError("connection reset")
        yield 5, "log", {"text": "c\n"}
        yield 5, "done", {"state": "ready", "error": None}


def test_follow_reattaches_from_the_last_offset(capsys: pytest.CaptureFixture[str]) -> None:
    api = _Flaky()
    progress = cli_templates.Progress("t")
    done = cli_templates.follow(api, "bld_x", progress)  # type: ignore[arg-type]
    assert done == {"state": "ready", "error": None}
    assert progress.state == "building"  # queue events only redraw the line
    assert api.attached == [0, 3]
    assert capsys.readouterr().out == "ab\nc\n"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_a_redrawn_line_on_a_terminal_only() -> None:
    terminal, pipe = _Terminal(), io.StringIO()
    for stream in (terminal, pipe):
        progress = cli_templates.Progress("myapp", stream)
        progress.draw()
        progress.state = "building"
        progress.draw()
        progress.clear()
    assert terminal.getvalue().startswith("\rmyapp: queued 0s\x1b[K\rmyapp: building ")
    assert terminal.getvalue().endswith("\r\x1b[K")
    assert pipe.getvalue() == ""
