"""The sync SDK against a real uvicorn server (fake node behind it)."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator

import httpx
import pytest

import space.sdk
from space.sdk import (
    AuthenticationError,
    ConflictError,
    NotFoundError,
    Sandbox,
    TransportError,
)
from tests.conftest import ServerThread
from tests.control.fakes import FakeNode


@pytest.fixture
def env(server: ServerThread, make_key: Callable[..., str], monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("SPACE_API_URL", server.url)
    monkeypatch.setenv("SPACE_API_KEY", make_key("acme"))
    return server.url


def test_public_names_are_pinned() -> None:
    assert space.sdk.__all__ == [
        "APIError",
        "AsyncCommand",
        "AsyncCredentials",
        "AsyncFiles",
        "AsyncSandbox",
        "AuditEntry",
        "AuthenticationError",
        "Call",
        "Calls",
        "Command",
        "CommandInfo",
        "ConflictError",
        "CredentialInfo",
        "Credentials",
        "Event",
        "ExecResult",
        "Files",
        "NotFoundError",
        "Sandbox",
        "SandboxInfo",
        "SpaceError",
        "TransportError",
    ]


def test_create_exec_files_kill(env: str, fake_node: FakeNode) -> None:
    with Sandbox.create(metadata={"k": "v"}) as sandbox:
        assert sandbox.state == "running"
        assert sandbox.exec("echo hello").stdout == "hello\n"
        assert sandbox.exec(["fail"]).exit_code == 1
        sandbox.files.write("/tmp/a", b"abc")
        sandbox.files.write("/tmp/b", io.BytesIO(b"x" * 900_000))
        assert sandbox.files.read("/tmp/a") == b"abc"
        out = io.BytesIO()
        assert sandbox.files.download("/tmp/b", out) == 900_000
        assert [s.id for s in Sandbox.list()] == [sandbox.id]
        sandbox_id = sandbox.id
    assert sandbox_id not in fake_node.vms
    with pytest.raises(NotFoundError):
        Sandbox.connect(sandbox_id)


def test_stream_yields_events_until_exit(env: str) -> None:
    with Sandbox.create() as sandbox:
        events = list(sandbox.stream("emit 3"))
        assert [e.kind for e in events] == ["stdout"] * 3 + ["exit"]
        assert events[0].data == b"line 0\n"
        assert events[-1].exit_code == 0
        command = sandbox.start("cat")
        command.send_stdin(b"ping", eof=True)
        assert [e.data for e in command.events() if e.kind == "stdout"] == [b"ping"]
        resumed = list(sandbox.start("emit 4").events(last_event_id=2))
        assert [e.id for e in resumed] == [3, 4, 5]


def test_errors_are_typed(env: str, server: ServerThread) -> None:
    with pytest.raises(AuthenticationError) as auth:
        Sandbox.list(api_key="wrong")
    assert auth.value.code == "unauthorized"
    with Sandbox.create() as sandbox:
        with pytest.raises(space.sdk.APIError) as not_impl:
            sandbox.pause()
        assert (not_impl.value.status, not_impl.value.code) == (501, "not_implemented")
        with pytest.raises(NotFoundError):
            sandbox.files.read("/missing")
        with pytest.raises(space.sdk.APIError) as relative:
            sandbox.files.read("etc/passwd")
        assert (relative.value.status, relative.value.field) == (422, "path")
        command = sandbox.start("emit 1")
        list(command.events())
        with pytest.raises(ConflictError):
            command.signal("TERM")
    with pytest.raises(TransportError):
        Sandbox.list(api_url="http://127.0.0.1:9")


class _CutStream(httpx.SyncByteStream):
    """Passes `keep` chunks through, then breaks like a dropped connection."""

    def __init__(self, inner: httpx.SyncByteStream, keep: int) -> None:
        self.inner = inner
        self.keep = keep

    def __iter__(self) -> Iterator[bytes]:
        for n, chunk in enumerate(self.inner):
            if n == self.keep:
                raise httpx.ReadError("connection dropped")
            yield chunk

    def close(self) -> None:
        self.inner.close()


class _DropFirstStream(httpx.BaseTransport):
    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner = inner
        self.requests: list[httpx.Request] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        response = self.inner.handle_request(request)
        if request.url.path.endswith("/events") and len(self.requests) == 1:
            assert isinstance(response.stream, httpx.SyncByteStream)
            response.stream = _CutStream(response.stream, keep=2)
        return response

    def close(self) -> None:
        self.inner.close()


def test_stream_reconnects_with_last_event_id(env: str) -> None:
    with Sandbox.create() as sandbox:
        command = sandbox.start("emit 5 0.05")
        http = sandbox._api.http
        flaky = _DropFirstStream(http._transport)
        http._transport = flaky
        events = list(command.events())
    assert [e.id for e in events] == [1, 2, 3, 4, 5, 6]
    assert [r.headers.get("last-event-id") for r in flaky.requests[:2]] == [None, "2"]


def test_pty_command_resize_and_attach(env: str) -> None:
    with Sandbox.create() as sandbox:
        command = sandbox.start("emit 1 2", pty=(24, 80))  # 2 s: time to resize
        command.resize(30, 100)
        attached = sandbox.command(command.id)  # as `space logs` finds it
        assert [e.data for e in attached.events(idle=5) if e.kind == "stdout"] == [b"line 0\n"]
        with pytest.raises(ConflictError):  # it exited: no terminal to resize
            command.resize(30, 100)
        quiet = sandbox.start("wait")
        assert list(sandbox.command(quiet.id).events(idle=0.3)) == []  # nothing so far
        with pytest.raises(ConflictError) as no_terminal:
            quiet.resize(30, 100)
        assert no_terminal.value.code == "no_terminal"
        quiet.signal("TERM")
        with pytest.raises(space.sdk.APIError) as bad:
            sandbox.exec("echo x", pty=(24, 80))
        assert (bad.value.status, bad.value.field) == (422, "pty")


def test_commands_are_listed_newest_first(env: str) -> None:
    with Sandbox.create() as sandbox:
        first = sandbox.start("emit 1")
        list(first.events())
        second = sandbox.start("wait")
        listed = sandbox.commands()
        assert [c.id for c in listed] == [second.id, first.id]
        assert (listed[0].state, listed[0].argv, listed[0].exit_code) == (
            "running",
            {"cmd": "wait"},
            None,
        )
        assert (listed[1].state, listed[1].exit_code) == ("exited", 0)
        second.signal("KILL")
