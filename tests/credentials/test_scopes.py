"""Scopes narrow and never widen; a sandbox's view and its version."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from space.credentials.guest_env import placeholder_env
from space.credentials.model import (
    Binding,
    Credential,
    CredentialUse,
    HeaderApply,
    Narrowing,
    Policy,
    RulesApply,
)
from space.credentials.scopes import (
    PLACEHOLDER_PREFIX,
    SandboxRef,
    WideningError,
    check_scope,
    host_matches,
    narrow,
    resolve,
)

pytestmark = pytest.mark.credentials

NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)
SECRET = b"s" * 32
SANDBOX = SandboxRef(id="sbx_1", org_id="org_1", project="prj_a", template="base")

BASE = Binding(
    hosts=["api.github.com", "*.example.com"],
    methods=["GET", "POST"],
    path_prefixes=["/repos/", "/v1/"],
    rate_limit={"rps": 10, "burst": 20},
)


def credential(**changes: Any) -> Credential:
    base = Credential(
        id="cred_1",
        org_id="org_1",
        name="github",
        scope="org",
        target=None,
        application=HeaderApply(),
        binding=BASE,
        policy=Policy(),
        version=1,
        fingerprint="abcd",
        expires_at=None,
        revoked_at=None,
        created_at=NOW,
        updated_at=NOW,
    )
    return replace(base, **changes)


def binding(**changes: Any) -> Binding:
    return Binding.model_validate(BASE.model_dump() | changes)


@pytest.mark.parametrize(
    "child",
    [
        binding(hosts=["api.github.com"]),
        binding(hosts=["a.example.com", "*.b.example.com"]),
        binding(methods=["GET"]),
        binding(path_prefixes=["/repos/space/"]),
        binding(rate_limit={"rps": 1, "burst": 2}),
    ],
)
def test_a_lower_scope_may_narrow(child: Binding) -> None:
    assert narrow(BASE, child) == child


@pytest.mark.parametrize(
    ("child", "field"),
    [
        (binding(hosts=["api.github.com", "evil.com"]), "binding.hosts.1"),
        (binding(hosts=["example.com"]), "binding.hosts.0"),
        (binding(hosts=["*.github.com"]), "binding.hosts.0"),
        (binding(methods=["GET", "DELETE"]), "binding.methods.1"),
        (binding(path_prefixes=["/"]), "binding.path_prefixes.0"),
        (binding(rate_limit={"rps": 11, "burst": 20}), "binding.rate_limit.rps"),
        (binding(rate_limit={"rps": 10, "burst": 21}), "binding.rate_limit.burst"),
        (binding(rate_limit=None), "binding.rate_limit"),
    ],
)
def test_a_lower_scope_that_widens_is_refused_by_field(child: Binding, field: str) -> None:
    with pytest.raises(WideningError) as caught:
        narrow(BASE, child)
    assert caught.value.field == field
    assert field in str(caught.value)


def test_a_narrowing_must_sit_below_its_credential() -> None:
    check_scope("org", "project")
    with pytest.raises(WideningError, match="scope"):
        check_scope("project", "project")


@pytest.mark.parametrize("bad", ["*", "*.com", "a..b", "-a.com", "a.com/x", "a b.com", "*.*.a.com"])
def test_malformed_host_patterns_are_refused(bad: str) -> None:
    with pytest.raises(ValidationError):
        Binding(hosts=[bad])


def test_wildcards_match_below_but_not_the_apex() -> None:
    assert host_matches("*.example.com", "a.b.example.com")
    assert not host_matches("*.example.com", "example.com")
    assert not host_matches("*.example.com", "badexample.com")


def view(credentials: list[Credential], narrowings: tuple[Narrowing, ...] = (), **kw: Any) -> Any:
    return resolve(
        kw.get("sandbox", SANDBOX),
        credentials,
        narrowings,
        now=kw.get("now", NOW),
        placeholder_secret=SECRET,
        previous=kw.get("previous"),
    )


def test_a_project_narrowing_applies_to_its_project_only() -> None:
    narrowing = Narrowing("cred_1", "project", "prj_a", binding(hosts=["api.github.com"]))
    mine = view([credential()], [narrowing])
    assert mine.entries[0].binding.hosts == ["api.github.com"]
    other = view([credential()], [narrowing], sandbox=replace(SANDBOX, project="prj_b"))
    assert other.entries[0].binding.hosts == BASE.hosts
    levels = {limit.key.level for limit in mine.entries[0].limits}
    assert levels == {"org", "project", "sandbox"}


def test_a_rules_credential_reaches_only_the_sandboxes_using_it_one_entry_per_use() -> None:
    secret = credential(id="cred_e2b", name="openai", application=RulesApply(), binding=None)
    assert view([secret]).entries == ()
    uses = (
        CredentialUse("cred_e2b", "api.openai.com", HeaderApply(template="Bearer {value}")),
        CredentialUse("cred_e2b", "*.example.com", HeaderApply(header="X-Key", template="{value}")),
    )
    mine = view([secret], sandbox=replace(SANDBOX, uses=uses))
    assert [(e.kind, e.binding.hosts, e.application) for e in mine.entries] == [
        ("rules", ["api.openai.com"], uses[0].application.model_dump()),
        ("rules", ["*.example.com"], uses[1].application.model_dump()),
    ]
    assert all(
        e.limits == () and e.binding.methods == Binding(hosts=["a.b"]).methods for e in mine.entries
    )
    assert placeholder_env(mine) == {}  # the guest gets no variable for it
    other = replace(SANDBOX, id="sbx_2", uses=(replace(uses[0], credential_id="cred_other"),))
    assert view([secret], sandbox=other).entries == ()
    revoked = replace(secret, revoked_at=NOW)
    assert view([revoked], sandbox=replace(SANDBOX, uses=uses)).excluded == (("openai", "revoked"),)


def test_a_project_credential_does_not_reach_another_project() -> None:
    scoped = credential(scope="project", target="prj_a")
    assert view([scoped]).entries
    assert not view([scoped], sandbox=replace(SANDBOX, project="prj_b")).entries
    assert not view([credential(org_id="org_2")]).entries


def test_a_conflicting_chain_is_left_out() -> None:
    project = Narrowing("cred_1", "project", "prj_a", binding(methods=["GET"]))
    template = Narrowing("cred_1", "template", "base", binding(methods=["POST"]))
    result = view([credential()], [project, template])
    assert not result.entries
    assert result.excluded == (("github", "bindings conflict at template:base.methods.0"),)


def test_revoked_and_expired_credentials_are_left_out() -> None:
    revoked = credential(revoked_at=NOW)
    expired = credential(id="cred_2", name="npm", expires_at=NOW - timedelta(seconds=1))
    result = view([revoked, expired])
    assert not result.entries
    assert dict(result.excluded) == {"github": "revoked", "npm": "expired"}


def test_placeholders_are_stable_per_sandbox_and_credential() -> None:
    first = view([credential()]).entries[0].placeholder
    assert first.startswith(PLACEHOLDER_PREFIX) and len(first) > 40
    assert view([credential()]).entries[0].placeholder == first
    other = view([credential()], sandbox=replace(SANDBOX, id="sbx_2")).entries[0].placeholder
    assert other != first


def test_the_version_moves_only_when_the_view_changes() -> None:
    first = view([credential()])
    assert first.version == 1
    same = view([credential(updated_at=NOW + timedelta(hours=1))], previous=first.stamp)
    assert same.version == 1
    rotated = view([credential(version=2)], previous=same.stamp)
    assert rotated.version == 2
    narrowed = Narrowing("cred_1", "sandbox", "sbx_1", binding(methods=["GET"]))
    bound = view([credential(version=2)], [narrowed], previous=rotated.stamp)
    assert bound.version == 3
    elsewhere = Narrowing("cred_1", "sandbox", "sbx_9", binding(methods=["GET"]))
    unaffected = view([credential(version=2)], [narrowed, elsewhere], previous=bound.stamp)
    assert unaffected.version == 3
    revoked = view([credential(version=2, revoked_at=NOW)], previous=unaffected.stamp)
    assert revoked.version == 4 and not revoked.entries


def test_policy_roles_task_types_and_windows() -> None:
    policy = Policy(
        roles=["ci"],
        task_types=["build"],
        windows=[{"weekdays": [1], "start_hour": 9, "end_hour": 17}],
    )
    tuesday_noon = datetime(2026, 12, 1, 12, tzinfo=UTC)
    assert policy.allows("ci", "build", tuesday_noon)
    assert not policy.allows("dev", "build", tuesday_noon)
    assert not policy.allows("ci", "chat", tuesday_noon)
    assert not policy.allows("ci", "build", tuesday_noon.replace(hour=18))
    assert not policy.allows("ci", "build", tuesday_noon + timedelta(days=1))
    assert Policy().allows(None, None, tuesday_noon)
