"""Every process a sandbox runs sees a variable per credential of its view, named
after the credential and holding the sandbox's placeholder, never the value: on
`/v1` exec and commands and on envd's `Start`; it follows the view (a revoked
credential's variable is gone for the next process, a new one appears), the
sandbox's own env wins over it, and a narrowed create gets only its names."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from space.credentials.guest_env import placeholder_env
from space.credentials.scopes import CredentialView
from tests.control.fakes import FakeNode
from tests.credentials.test_api_credentials import VALUE, created
from tests.e2b.test_e2b_wire import STREAM, envelope

pytestmark = pytest.mark.credentials

AWS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"


async def sandbox(client: httpx.AsyncClient, **fields: Any) -> str:
    answer = await client.post("/v1/sandboxes", json=fields)
    assert answer.status_code == 201, answer.text
    sandbox_id: str = answer.json()["id"]
    return sandbox_id


async def exec_env(client: httpx.AsyncClient, sandbox_id: str, **body: Any) -> dict[str, str]:
    answer = await client.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"cmd": "env", **body})
    assert answer.status_code == 200, answer.text
    assert VALUE not in answer.text
    lines = answer.json()["stdout"].splitlines()
    return dict(line.split("=", 1) for line in lines)


async def placeholders(client: httpx.AsyncClient, sandbox_id: str) -> dict[str, str]:
    shown = await client.get(f"/v1/sandboxes/{sandbox_id}/credentials")
    return {c["name"]: c["placeholder"] for c in shown.json()["credentials"]}


async def test_a_command_sees_the_placeholder_and_never_the_value(
    client: httpx.AsyncClient, fake_node: FakeNode
) -> None:
    await created(client)
    sandbox_id = await sandbox(client, env={"MINE": "1"})
    [(name, placeholder)] = (await placeholders(client, sandbox_id)).items()
    assert name == "GITHUB_TOKEN" and placeholder.startswith("space_ph_")
    assert await exec_env(client, sandbox_id) == {"MINE": "1", "GITHUB_TOKEN": placeholder}

    started = await client.post(f"/v1/sandboxes/{sandbox_id}/commands", json={"cmd": "echo hi"})
    assert started.status_code == 201, started.text
    _, request = fake_node.started[-1]
    assert request.env == {"GITHUB_TOKEN": placeholder}
    assert all(VALUE not in repr(r) for _, r in fake_node.started)


async def test_an_envd_process_sees_the_placeholder(
    client: httpx.AsyncClient, fake_node: FakeNode, make_key: Callable[..., str]
) -> None:
    await created(client)
    made = await client.post(
        "/sandboxes", json={"templateID": "base"}, headers={"X-API-KEY": make_key("acme")}
    )
    assert made.status_code == 201, made.text
    sandbox_id, token = made.json()["sandboxID"], made.json()["envdAccessToken"]
    start = {"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "echo hi"], "envs": {"X": "1"}}}
    answer = await client.post(
        "/process.Process/Start",
        content=envelope(start),
        headers={**STREAM, "E2b-Sandbox-Id": sandbox_id, "X-Access-Token": token},
    )
    assert answer.status_code == 200, answer.text
    _, request = fake_node.started[-1]
    placeholder = (await placeholders(client, sandbox_id))["GITHUB_TOKEN"]
    assert request.env == {"GITHUB_TOKEN": placeholder, "X": "1"}
    assert VALUE not in answer.text


async def test_the_variables_follow_the_view(client: httpx.AsyncClient) -> None:
    github = await created(client)
    sandbox_id = await sandbox(client)
    assert "GITHUB_TOKEN" in await exec_env(client, sandbox_id)

    revoked = await client.post(f"/v1/credentials/{github['id']}/revoke")
    assert revoked.status_code == 200, revoked.text
    assert "GITHUB_TOKEN" not in await exec_env(client, sandbox_id)

    await created(client, name="NPM_TOKEN", scope="sandbox", target=sandbox_id)
    env = await exec_env(client, sandbox_id)
    assert env["NPM_TOKEN"] == (await placeholders(client, sandbox_id))["NPM_TOKEN"]


async def test_the_sandbox_and_the_request_env_win(client: httpx.AsyncClient) -> None:
    await created(client)
    await created(client, name="NPM_TOKEN")
    sandbox_id = await sandbox(client, env={"GITHUB_TOKEN": "from-create"})
    env = await exec_env(client, sandbox_id, env={"NPM_TOKEN": "from-exec"})
    assert env == {"GITHUB_TOKEN": "from-create", "NPM_TOKEN": "from-exec"}


async def test_a_narrowed_sandbox_gets_only_its_variables(client: httpx.AsyncClient) -> None:
    await created(client)
    await created(client, name="NPM_TOKEN")
    sandbox_id = await sandbox(client, credentials=["NPM_TOKEN"])
    assert set(await exec_env(client, sandbox_id)) == {"NPM_TOKEN"}
    assert await exec_env(client, await sandbox(client, credentials=[])) == {}


async def test_an_aws_credential_fills_both_aws_variables(client: httpx.AsyncClient) -> None:
    application = {"kind": "aws_sigv4", "access_key_id": AWS_KEY_ID}
    await created(client, name="AWS", application=application, binding={"hosts": ["*.aws.com"]})
    sandbox_id = await sandbox(client)
    placeholder = (await placeholders(client, sandbox_id))["AWS"]
    env = await exec_env(client, sandbox_id)
    assert env == dict.fromkeys(["AWS", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"], placeholder)
    assert AWS_KEY_ID not in str(env)


def test_two_aws_credentials_fill_neither_aws_variable() -> None:
    entry = {
        "application": {},
        "binding": {"hosts": ["s3.aws.com"]},
        "policy": {},
        "value_version": 1,
        "expires_at": None,
        "limits": [],
        "kind": "aws_sigv4",
    }
    view = CredentialView.from_json(
        {
            "sandbox_id": "sb1",
            "version": 1,
            "digest": "d",
            "entries": [
                {**entry, "id": "c1", "name": "ONE", "placeholder": "space_ph_1"},
                {**entry, "id": "c2", "name": "TWO", "placeholder": "space_ph_2"},
                {**entry, "id": "c3", "name": "bad-name", "placeholder": "space_ph_3"},
            ],
            "excluded": [],
        }
    )
    assert placeholder_env(view) == {"ONE": "space_ph_1", "TWO": "space_ph_2"}
