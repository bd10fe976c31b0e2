"""The node server's gate: the node token on every route (constant-time compare), the
token file's mode, bounded bodies, and a node acting only on its own sandboxes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from space.config.node import NodeLinkConfig
from space.config.secrets import NodeTokenError
from space.node.metrics import NodeMetrics
from space.node.server import create_node_app
from space.seam import wire
from space.seam.errors import NodeError, SandboxNotFound
from space.seam.values import ExecRequest
from tests.control.fakes import PowerNode
from tests.scaleout.conftest import SANDBOX, NodeServing, new_token, remote, serving

pytestmark = pytest.mark.scaleout

SEAM_PATHS = sorted(
    {value.path for value in vars(wire).values() if isinstance(value, wire.Call)}
    | {f"{wire.PREFIX}/no_such_call", "/", "/seam", "/docs"}
)


def test_every_seam_call_has_a_route() -> None:
    assert len(SEAM_PATHS) > 30


@pytest.mark.parametrize("headers", [{}, {"authorization": "Bearer wrong"}, {"authorization": ""}])
async def test_no_or_wrong_token_is_401_json_on_every_route(
    served: NodeServing, token: str, headers: dict[str, str]
) -> None:
    async with httpx.AsyncClient(base_url=served.url, headers=headers) as http:
        for path in SEAM_PATHS:
            for method in ("POST", "GET"):
                response = await http.request(method, path, content=b"{}")
                assert response.status_code == 401, (method, path)
                assert response.json()["error"]["type"] == "Unauthorized"
                assert token not in response.text


async def test_token_without_bearer_prefix_or_with_extra_bytes_is_refused(
    served: NodeServing, token: str
) -> None:
    async with httpx.AsyncClient(base_url=served.url) as http:
        for offered in (token, f"Bearer  {token}", f"Bearer {token}x", f"bearer{token}"):
            response = await http.post(wire.TEMPLATES.path, headers={"authorization": offered})
            assert response.status_code == 401


async def test_the_right_token_is_served(served: NodeServing, token: str) -> None:
    headers = {"authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=served.url, headers=headers) as http:
        response = await http.post(wire.TEMPLATES.path, content=b"{}")
    assert response.status_code == 200
    assert response.json() == ["base", "busybox"]


async def test_healthz_answers_liveness_only_without_a_token(served: NodeServing) -> None:
    async with httpx.AsyncClient(base_url=served.url) as http:
        response = await http.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


async def test_open_port_without_the_token_is_refused_before_the_tunnel(
    served: NodeServing, fake: PowerNode
) -> None:
    fake.ports[SANDBOX, 80] = 1  # never reached
    async with remote(served.url, new_token()) as node:
        with pytest.raises(NodeError, match="Unauthorized"):
            await node.open_port(SANDBOX, 80)


async def test_node_a_token_against_node_b_is_401(fake: PowerNode) -> None:
    token_a, token_b = new_token(), new_token()
    async with serving(PowerNode(), token_a) as node_a, serving(fake, token_b) as node_b:
        async with remote(node_b.url, token_a) as wrong, remote(node_a.url, token_a) as right:
            assert await right.templates() == ["base", "busybox"]
            with pytest.raises(NodeError, match="Unauthorized"):
                await wrong.observe()
            with pytest.raises(NodeError, match="Unauthorized"):
                await wrong.start_command(SANDBOX, ExecRequest(cmd="wait"))
            with pytest.raises(NodeError, match="Unauthorized"):
                [chunk async for chunk in wrong.read_file(SANDBOX, "/etc/hostname")]
        assert fake.started == []


async def test_unknown_sandbox_is_404_and_sandbox_not_found(
    served: NodeServing, token: str
) -> None:
    headers = {"authorization": f"Bearer {token}"}
    body = wire.EXEC.encode_args(
        sandbox_id="not-mine", request=ExecRequest(cmd="echo hi"), command_id=None
    )
    async with httpx.AsyncClient(base_url=served.url, headers=headers) as http:
        response = await http.post(wire.EXEC.path, content=body)
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "SandboxNotFound"
    async with remote(served.url, token) as node:
        with pytest.raises(SandboxNotFound) as caught:
            await node.exec("not-mine", ExecRequest(cmd="echo hi"))
    assert caught.value.sandbox_id == "not-mine"


async def test_oversized_json_body_is_413_json(fake: PowerNode, token: str) -> None:
    config = NodeLinkConfig(max_message_bytes=64 * 1024)
    headers = {"authorization": f"Bearer {token}"}
    big = ExecRequest(cmd="cat", stdin=b"x" * 100_000)
    async with serving(fake, token, config) as running:
        async with httpx.AsyncClient(base_url=running.url, headers=headers) as http:
            sized = await http.post(
                wire.EXEC.path,
                content=wire.EXEC.encode_args(sandbox_id=SANDBOX, request=big, command_id=None),
            )

            async def chunked():  # no Content-Length: counted as it arrives
                yield wire.EXEC.encode_args(sandbox_id=SANDBOX, request=big, command_id=None)

            streamed = await http.post(wire.EXEC.path, content=chunked())
    for response in (sized, streamed):
        assert response.status_code == 413
        assert response.json()["error"]["type"] == "TooLarge"
    assert fake.started == []


async def test_oversized_upload_is_413_and_not_written(fake: PowerNode, token: str) -> None:
    config = NodeLinkConfig(max_upload_bytes=100_000)

    async def chunks():
        for _ in range(4):
            yield b"y" * 50_000

    async with serving(fake, token, config) as running, remote(running.url, token) as node:
        with pytest.raises(NodeError, match="larger than 100000 bytes"):
            await node.write_file(SANDBOX, "/big", chunks())
        assert await node.write_file(SANDBOX, "/small", _once(b"z" * 1000)) == 1000
    assert (SANDBOX, "/big") not in fake.files


async def _once(data: bytes):
    yield data


@pytest.mark.parametrize("weak", ["", "x" * 31])
def test_the_node_app_refuses_an_empty_or_short_token(fake: PowerNode, weak: str) -> None:
    with pytest.raises(NodeTokenError, match="at least 32 characters"):
        create_node_app(fake, weak, NodeLinkConfig())


def test_short_token_is_refused_naming_the_variable() -> None:
    with pytest.raises(ValueError, match="SPACE_NODE_TOKEN must be at least 32"):
        NodeLinkConfig(token="short")


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("SPACE_NODE_URL", "ftp://node:1"),
        ("SPACE_NODE_URL", "http://node:1/path"),
        ("SPACE_NODE_LISTEN", "no-port"),
        ("SPACE_NODE_MAX_MESSAGE_BYTES", "10"),
    ],
)
def test_invalid_settings_name_their_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValidationError, match=variable):
        NodeLinkConfig()


def test_token_file_readable_by_others_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "node.token"
    path.write_text(new_token())
    path.chmod(0o644)
    with pytest.raises(NodeTokenError, match=f"SPACE_NODE_TOKEN_FILE {path} is readable"):
        NodeLinkConfig(token_file=path).read_token()
    path.chmod(0o600)
    assert NodeLinkConfig(token_file=path).read_token() == path.read_text()


def test_no_token_is_refused() -> None:
    with pytest.raises(NodeTokenError, match="SPACE_NODE_TOKEN_FILE"):
        NodeLinkConfig().read_token()


def _space_node(env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SPACE_NODE_")}
    return subprocess.run(
        [sys.executable, "-m", "space.cli", "node", "--data-dir", str(tmp_path / "data")],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_space_node_refuses_a_0644_token_file_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "node.token"
    path.write_text(new_token())
    path.chmod(0o644)
    done = _space_node({"SPACE_NODE_TOKEN_FILE": str(path)}, tmp_path)
    assert done.returncode == 2
    assert str(path) in done.stderr and "readable by group or others" in done.stderr
    assert not (tmp_path / "data").exists()  # refused before anything was made


def test_space_node_refuses_to_serve_without_a_token(tmp_path: Path) -> None:
    done = _space_node({}, tmp_path)
    assert done.returncode == 2
    assert "no node token" in done.stderr


def test_api_refuses_a_node_url_without_a_token(tmp_path: Path) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SPACE_NODE_")}
    env = {**clean, "SPACE_NODE_URL": "http://127.0.0.1:9", "SPACE_DATA_DIR": str(tmp_path)}
    for command in ("api", "controller"):
        done = subprocess.run(
            [sys.executable, "-m", "space.cli", command],
            env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert "no node token" in done.stderr


async def test_metrics_are_served_without_a_token(fake: PowerNode, token: str) -> None:
    metrics = NodeMetrics(lambda: [])
    metrics.executed(0.0)
    app = create_node_app(fake, token, NodeLinkConfig(token=token), metrics=metrics.registry)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://node"
    ) as http:
        scraped = await http.get("/metrics")
        refused = await http.post(wire.TEMPLATES.path, content=b"{}")
    assert scraped.status_code == 200, scraped.text
    assert "space_node_exec_duration_seconds_count 1.0" in scraped.text
    assert refused.status_code == 401
