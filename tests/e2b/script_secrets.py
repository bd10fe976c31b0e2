"""E2B secrets under the current SDK (e2b 2.63), against the fake node: `Secret`'s
create, list, get, update and destroy never answer a value; a sandbox created
with `network.rules` gets each header as a use of the secret on that host alone,
and neither the value nor a placeholder reaches its environment; `update_network`
replaces them; what SPACE cannot honour is refused naming the field. Not
collected by default (2.21.1 has no `Secret`): test_e2b_secrets.py runs it under
2.63."""

from __future__ import annotations

import os
from typing import Any

import httpx
import pytest
from e2b import Sandbox, Secret
from e2b.exceptions import SandboxException, SecretException, SecretNotFoundException

from tests.conftest import ServerThread
from tests.control.fakes import FakeNode

pytestmark = [pytest.mark.e2b, pytest.mark.credentials, pytest.mark.usefixtures("e2b_env")]

VALUE = "sk-live-0123456789abcdef"
NEW_VALUE = "sk-live-fedcba9876543210"


def _raw(server: ServerThread, method: str, path: str, **kw: Any) -> httpx.Response:
    """The answer as it is on the wire (the SDK's models drop unknown fields)."""
    return httpx.request(method, server.url + path, headers={"X-API-KEY": _key()}, **kw)


def _key() -> str:
    return os.environ["E2B_API_KEY"]


def test_secret_values_go_in_and_never_come_out(e2b_env: ServerThread) -> None:
    made = Secret.create("OpenAI", VALUE, metadata={"team": "ml"})
    assert (made.name, made.version, made.metadata) == ("openai", 1, {"team": "ml"})
    assert Secret.get_info("openai").secret_id == made.secret_id
    assert Secret.get_info(made.secret_id).name == "openai"
    updated = Secret.update("openai", NEW_VALUE, metadata={"team": "infra"})
    assert (updated.version, updated.metadata) == (2, {"team": "infra"})
    assert Secret.update(made.secret_id, VALUE).metadata == {"team": "infra"}  # kept
    listed = Secret.list().next_items()
    assert [s.name for s in listed] == ["openai"]
    answers = [
        _raw(e2b_env, "GET", "/secrets").text,
        _raw(e2b_env, "GET", f"/secrets/{made.secret_id}").text,
        _raw(e2b_env, "POST", "/secrets", json={"name": "other", "value": VALUE}).text,
        _raw(e2b_env, "POST", "/secrets/other", json={"value": NEW_VALUE}).text,
        _raw(e2b_env, "GET", "/v1/credentials").text,
    ]
    for text in answers:
        assert VALUE not in text and NEW_VALUE not in text
    assert Secret.exists("other") is True
    assert Secret.destroy("other") is True
    assert Secret.destroy("other") is False
    assert Secret.exists("other") is False
    with pytest.raises(SecretNotFoundException):
        Secret.get_info("other")


def test_listing_pages_oldest_first() -> None:
    for name in ("a1", "a2", "a3"):
        Secret.create(name, VALUE)
    paginator = Secret.list(limit=2)
    first = paginator.next_items()
    assert paginator.has_next
    second = paginator.next_items()
    assert not paginator.has_next
    assert [s.name for s in first + second] == ["a1", "a2", "a3"]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"name": "", "value": VALUE}, "name"),
        ({"name": "sec_x", "value": VALUE}, "reserved"),
        ({"name": "a{b", "value": VALUE}, "name"),
        ({"name": "ok", "value": ""}, "value"),
        ({"name": "ok", "value": "x" * (16 * 1024 + 1)}, "value"),
        ({"name": "ok", "value": VALUE, "metadata": {f"k{i}": "v" for i in range(33)}}, "metadata"),
        ({"name": "ok", "value": VALUE, "allowlist": ["x"]}, "allowlist"),
    ],
)
def test_bad_secret_bodies_are_refused_naming_the_field(
    e2b_env: ServerThread, body: dict[str, Any], says: str
) -> None:
    answer = _raw(e2b_env, "POST", "/secrets", json=body)
    assert 400 <= answer.status_code < 500, answer.text
    assert answer.json()["code"] == answer.status_code and says in answer.json()["message"]
    assert VALUE not in answer.text


def test_a_taken_name_is_a_conflict() -> None:
    Secret.create("dup", VALUE)
    with pytest.raises(SecretException, match="409|exists"):
        Secret.create("DUP", VALUE)


def _view(server: ServerThread, sandbox_id: str) -> dict[str, Any]:
    answer = httpx.get(
        f"{server.url}/v1/sandboxes/{sandbox_id}/credentials",
        headers={"Authorization": f"Bearer {_key()}"},
    )
    assert answer.status_code == 200, answer.text
    view: dict[str, Any] = answer.json()
    return view


def _rules(header_value: str, host: str = "api.openai.com") -> dict[str, Any]:
    return {host: [{"transform": {"headers": {"Authorization": header_value}}}]}


def test_a_rule_transform_is_the_sandboxs_use_of_the_secret(
    e2b_env: ServerThread, fake_node: FakeNode
) -> None:
    secret = Secret.create("openai", VALUE)
    network = {
        "allow_out": ["api.openai.com"],
        "rules": _rules(f"Bearer {Secret.fill('openai')}"),
    }
    sandbox = Sandbox.create(network=network)
    view = _view(e2b_env, sandbox.sandbox_id)
    [entry] = view["credentials"]
    assert (entry["name"], entry["kind"], entry["hosts"]) == ("openai", "rules", ["api.openai.com"])
    grant = fake_node.grants[sandbox.sandbox_id][-1]
    [held] = grant.view["entries"]
    assert held["application"] == {
        "kind": "header",
        "header": "Authorization",
        "template": "Bearer {value}",
    }
    assert grant.value(secret.secret_id, 1) == VALUE  # the gateway has it, on the host
    assert sandbox.commands.run("echo up").stdout == "up\n"
    [(_, started)] = [(sid, r) for sid, r in fake_node.started if sid == sandbox.sandbox_id]
    env = repr(fake_node.envs[sandbox.sandbox_id]) + repr(started.env)  # create's and the process's
    assert VALUE not in env and entry["placeholder"] not in env and "e2b.secrets" not in env
    other = Sandbox.create()  # a sandbox without the rule does not get the secret
    assert _view(e2b_env, other.sandbox_id)["credentials"] == []
    Secret.update("openai", NEW_VALUE)  # a new value reaches the running sandbox
    newest = fake_node.grants[sandbox.sandbox_id][-1]
    assert newest.value(secret.secret_id, 2) == NEW_VALUE
    Secret.destroy("openai")
    assert fake_node.grants[sandbox.sandbox_id][-1].view["entries"] == []


@pytest.mark.parametrize(
    ("rules", "says"),
    [
        (_rules("Bearer ${e2b.secrets.nope}"), "no secret named 'nope'"),
        (_rules("Bearer fixed"), "only from one secret"),
        (_rules("${e2b.secrets.known}:${e2b.secrets.known}"), "only from one secret"),
        (_rules("Bearer ${e2b.secrets.known}", host="10.0.0.0/8"), "host names"),
        ({"api.x.com": [{"transform": {"body": "x"}}]}, "only `headers`"),
        (
            {"api.x.com": [{"transform": {"headers": {"Bad Header": "${e2b.secrets.known}"}}}]},
            "Bad Header",
        ),
    ],
)
def test_rules_space_cannot_honour_are_refused_naming_the_field(
    e2b_env: ServerThread, rules: dict[str, Any], says: str
) -> None:
    if not Secret.exists("known"):
        Secret.create("known", VALUE)
    answer = _raw(
        e2b_env, "POST", "/v2/sandboxes", json={"templateID": "base", "network": {"rules": rules}}
    )
    assert 400 <= answer.status_code < 500, answer.text
    message = answer.json()["message"]
    assert says in message and "network.rules[" in message, message
    assert VALUE not in answer.text


def test_update_network_replaces_the_rules_of_a_running_sandbox(
    e2b_env: ServerThread, fake_node: FakeNode
) -> None:
    Secret.create("later", VALUE)
    sandbox = Sandbox.create()
    assert _view(e2b_env, sandbox.sandbox_id)["credentials"] == []
    rules = _rules("token ${e2b.secrets.later}", host="api.github.com")
    sandbox.update_network({"allow_out": ["api.github.com"], "rules": rules})
    [entry] = _view(e2b_env, sandbox.sandbox_id)["credentials"]
    assert entry["hosts"] == ["api.github.com"]
    [held] = fake_node.grants[sandbox.sandbox_id][-1].view["entries"]
    assert held["application"]["template"] == "token {value}"
    with pytest.raises(SandboxException, match="no secret named 'gone'"):
        sandbox.update_network({"rules": _rules("${e2b.secrets.gone}")})
    assert len(_view(e2b_env, sandbox.sandbox_id)["credentials"]) == 1  # a refusal changes nothing
    sandbox.update_network({"allow_out": ["api.github.com"]})  # no rules: cleared, as on E2B
    assert _view(e2b_env, sandbox.sandbox_id)["credentials"] == []
    assert fake_node.grants[sandbox.sandbox_id][-1].view["entries"] == []
