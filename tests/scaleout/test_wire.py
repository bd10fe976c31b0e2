"""The seam's JSON codec: every value and every error survives the wire as itself;
anything outside the types is refused by name."""

from __future__ import annotations

import dataclasses
import errno
import json

import pytest

from space.seam import errors, values, wire
from space.seam.errors import NodeError
from space.seam.protocol import NodeClient

pytestmark = pytest.mark.scaleout

SAMPLES = [
    values.SandboxSpec("s1", "base", 512, 2, {"A": "b"}, {"mode": "allowlist", "rules": []}),
    values.SandboxSpec("s1"),
    values.SandboxSpec("s1", volumes=(values.VolumeMount("vol1", "/data", True),)),
    values.VolumeMount("vol1", "/data"),
    values.BuildSpec("t", "FROM base", {"a.txt": b"\x00x"}, {"A": "b"}, "s", "r", 1024, 512, None),
    values.BuildStatus("ready", ("line",), 1, "d" * 32, None),
    values.TemplateUsage(3, 5 << 30),
    values.CredentialGrant("org", {"version": 2, "entries": [{"id": "c"}]}, {"c:2": "v"}),
    values.AuditBatch("gateway-x", 4, ({"seq": 4, "hash": "ab"},)),
    values.SandboxObservation("s1", "error", "base", "boot failed", 3),
    values.EgressRecord(
        1.25, "http", "allow", "rule", 2, "h", "s", "1.2.3.4", "GET", "/", "r", 200
    ),
    values.WarmPoolStats("base", 2, 1, 5, 6),
    values.ExecRequest(None, ("ls", "-l"), {"X": "y"}, "/", b"\x00\xff", 2.5, (24, 80), 1024),
    values.ExecRequest("echo hi"),
    values.ExecResult(3, b"out\x00", b"err\xff", 1, 2),
    values.ProcessEvent("stdout", b"\x01\x02"),
    values.ProcessEvent("exit", exit_code=137),
    values.Record(3, "stdout", {"data": "aGk="}),
    values.CommandEnd("cmd1", 137),
    values.CommandEnd("cmd2", None),
    values.FileInfo("/a/b", "b", "symlink", 10, 0o777, 1.5, 0, 0, "/c"),
    values.ProcessInfo(7, ("sh", "-c", "x"), "x", True, False, True, None, 9.0),
    values.WatchEvent("rename", "/a", True),
]


def test_every_value_type_has_a_sample() -> None:
    crossing = {
        cls
        for cls in vars(values).values()
        if isinstance(cls, type) and dataclasses.is_dataclass(cls)
    }
    assert crossing == {type(sample) for sample in SAMPLES}


@pytest.mark.parametrize("value", SAMPLES, ids=lambda v: type(v).__name__)
def test_values_round_trip_through_json(value: object) -> None:
    text = json.dumps(wire.encode(value))
    assert wire.decode(type(value), json.loads(text)) == value


def test_bytes_cross_as_base64() -> None:
    assert wire.encode(values.ProcessEvent("stdout", b"hi"))["data"] == "aGk="


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"sandbox_id": "s", "extra": 1}, r"unknown fields \['extra'\]"),
        ({"template": "base"}, "sandbox_id"),
        ({"sandbox_id": 5}, "body.sandbox_id: expected str"),
        ({"sandbox_id": "s", "vcpus": True}, "body.vcpus: expected int"),
        ({"sandbox_id": "s", "env": {"A": 1}}, "body.env.A: expected str"),
        ([], "expected a SandboxSpec object"),
    ],
)
def test_malformed_values_are_refused_by_name(data: object, message: str) -> None:
    with pytest.raises(wire.WireError, match=message):
        wire.decode(values.SandboxSpec, data)


def test_literals_bytes_and_tuples_are_checked() -> None:
    with pytest.raises(wire.WireError, match="not one of"):
        wire.decode(values.ProcessEvent, {"kind": "exec"})
    with pytest.raises(wire.WireError, match="invalid base64"):
        wire.decode(values.ProcessEvent, {"kind": "stdout", "data": "***"})
    with pytest.raises(wire.WireError, match="expected 2 items"):
        wire.decode(values.ExecRequest, {"pty": [1, 2, 3]})


def test_call_arguments_are_checked() -> None:
    body = json.loads(
        wire.EXEC.encode_args(sandbox_id="s", request=values.ExecRequest("x"), command_id=None)
    )
    assert wire.EXEC.decode_args(body) == {
        "sandbox_id": "s",
        "request": values.ExecRequest("x"),
        "command_id": None,
    }
    with pytest.raises(wire.WireError, match="missing arguments"):
        wire.EXEC.decode_args({"sandbox_id": "s"})
    with pytest.raises(wire.WireError, match="unknown arguments"):
        wire.EXEC.decode_args({**body, "more": 1})


def test_messages_are_bounded() -> None:
    with pytest.raises(wire.TooLarge):
        wire.loads(b"[" + b"1," * 100 + b"1]", 100)
    with pytest.raises(wire.WireError, match="invalid JSON"):
        wire.loads(b"{", 100)
    with pytest.raises(wire.WireError, match="nested too deeply"):
        wire.loads(b"[" * 100_000 + b"]" * 100_000, 1 << 20)


ERRORS = [
    errors.SandboxNotFound("s1"),
    errors.SandboxUnavailable("s1", "paused", "by request"),
    errors.BootFailed("s1", "no agent", "console\nlines"),
    errors.UnknownTemplate("nope", ["base", "busybox"]),
    errors.SnapshotMissing("s1"),
    errors.NodeError("agent cut off"),
    FileNotFoundError(errno.ENOENT, "No such file or directory", "/x"),
    IsADirectoryError(errno.EISDIR, "Is a directory", "/d"),
    NotADirectoryError(errno.ENOTDIR, "Not a directory", "/f"),
    PermissionError(errno.EACCES, "Permission denied", "/root"),
    FileExistsError(errno.EEXIST, "File exists", "/e"),
    ProcessLookupError(1234),
    ConnectionRefusedError("nothing listens on port 81"),
    TimeoutError("agent did not answer"),
]


def test_every_seam_error_has_a_sample() -> None:
    seam = {c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, NodeError)}
    assert seam - {errors.NodeUnreachable} == {type(e) for e in ERRORS} & seam


@pytest.mark.parametrize("exc", ERRORS, ids=lambda e: type(e).__name__)
def test_errors_come_back_as_their_class(exc: Exception) -> None:
    back = wire.decode_error(json.loads(wire.dumps(wire.encode_error(exc))))
    assert type(back) is type(exc)
    assert str(back) == str(exc)
    public = {k: v for k, v in vars(exc).items() if not k.startswith("_")}
    assert {k: getattr(back, k) for k in public} == public
    if isinstance(exc, OSError):
        assert (back.errno, back.strerror, back.filename) == (exc.errno, exc.strerror, exc.filename)


def test_a_subclass_crosses_as_its_nearest_known_class() -> None:
    class CutOff(errors.SandboxUnavailable):
        pass

    class Unsupported(OSError):
        pass

    back = wire.decode_error(wire.encode_error(CutOff("s1", "running", "agent gone")))
    assert type(back) is errors.SandboxUnavailable
    assert (back.sandbox_id, back.state, back.reason) == ("s1", "running", "agent gone")
    unsupported = wire.decode_error(wire.encode_error(Unsupported(95, "no reflink", "/p")))
    assert type(unsupported) is OSError and unsupported.errno == 95
    too_large = wire.decode_error(wire.encode_error(wire.TooLarge(10)))
    assert type(too_large) is NodeError and "larger than 10 bytes" in str(too_large)


def test_unknown_error_types_become_a_node_error() -> None:
    back = wire.decode_error(wire.encode_error(KeyError("k")))
    assert type(back) is NodeError
    assert "KeyError" in str(back)
    assert type(wire.decode_error({"no": "error"})) is NodeError


def test_statuses() -> None:
    assert wire.error_status(errors.SandboxNotFound("s")) == 404
    assert wire.error_status(wire.TooLarge(1)) == 413
    assert wire.error_status(wire.WireError("x")) == 400
    assert wire.error_status(RuntimeError("x")) == 500


def test_every_node_client_method_is_a_wire_call() -> None:
    methods = {name for name in dir(NodeClient) if not name.startswith("_")}
    calls = {value.name for value in vars(wire).values() if isinstance(value, wire.Call)}
    handle_calls = {"write_stdin", "close_stdin", "signal", "resize"}
    assert calls - handle_calls == methods
