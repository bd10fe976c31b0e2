"""Credential policies by role, task type and UTC window, as the gateway applies them
(`WireCredentials`, sans-io): the sandbox's role and task type travel in its view
(from the sandbox row, `SandboxRef`), each request is judged against them and the
clock, a window that closes between two requests of one connection refuses the
second, and every refusal is audited without the value."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from space.credentials.audit import AuditChain
from space.credentials.model import Binding, Credential, HeaderApply, Policy, TimeWindow
from space.credentials.oauth import TokenCache
from space.credentials.ratelimit import RateLimiter
from space.credentials.scopes import CredentialView, SandboxRef, resolve
from space.credentials.wire import Denied, Plan, WireCredentials, WireRequest

SECRET = b"p" * 32
VALUE = "real-policy-value-0123456789"
HOST = "api.example.test"


def _credential(policy: Policy) -> Credential:
    now = datetime.now(UTC)
    return Credential(
        id="cred_policy",
        org_id="org_1",
        name="deploy_token",
        scope="org",
        target=None,
        application=HeaderApply(header="Authorization", template="Bearer {value}"),
        binding=Binding(hosts=[HOST]),
        policy=policy,
        version=1,
        fingerprint="f",
        expires_at=None,
        revoked_at=None,
        created_at=now,
        updated_at=now,
    )


def _view(policy: Policy, role: str | None, task_type: str | None) -> CredentialView:
    ref = SandboxRef("sb1", "org_1", None, "base", role=role, task_type=task_type)
    return resolve(
        ref,
        [_credential(policy)],
        [],
        now=datetime.now(UTC),
        placeholder_secret=SECRET,
        previous=None,
    )


def _wire(view: CredentialView, clock: list[datetime]) -> tuple[WireCredentials, AuditChain]:
    async def fetch(*_: object) -> bytes:
        raise AssertionError("no token is minted here")

    audit = AuditChain()
    wire = WireCredentials(
        "sb1",
        "org_1",
        view,
        lambda _id, _version: VALUE,
        limiter=RateLimiter(),
        audit=audit,
        tokens=TokenCache(fetch),
        clock=lambda: clock[0],
    )
    return wire, audit


def _request() -> WireRequest:
    return WireRequest(HOST, "GET", b"/deploy", [(b"host", HOST.encode())], tls=True)


def _injected(plan: Plan | Denied) -> bool:
    assert isinstance(plan, Plan), plan
    return (b"authorization", f"Bearer {VALUE}".encode()) in plan.headers


async def _judged(policy: Policy, role: str | None, task_type: str | None) -> bool:
    wire, audit = _wire(_view(policy, role, task_type), [datetime.now(UTC)])
    plan = await wire.plan(_request())
    if isinstance(plan, Denied):
        assert plan.status == 403 and plan.reason == "credential policy denies", plan
        assert [r.decision for r in audit.records] == ["deny: credential policy denies"]
        assert VALUE not in repr(audit.records)
        return False
    return _injected(plan)


def test_the_view_carries_the_sandboxs_role_and_task_type_across_the_seam() -> None:
    view = _view(Policy(roles=["ci"]), "ci", "deploy")
    again = CredentialView.from_json(view.to_json())
    assert (again.role, again.task_type) == ("ci", "deploy")


async def test_a_role_policy_applies_only_to_sandboxes_of_that_role() -> None:
    policy = Policy(roles=["ci"])
    assert await _judged(policy, "ci", None)
    assert not await _judged(policy, "developer", None)
    assert not await _judged(policy, None, None)  # a sandbox made before roles


async def test_a_task_type_policy_applies_only_to_that_task_type() -> None:
    policy = Policy(task_types=["deploy"])
    assert await _judged(policy, "admin", "deploy")
    assert not await _judged(policy, "admin", "build")
    assert not await _judged(policy, "admin", None)


async def test_a_window_that_closes_refuses_the_next_request() -> None:
    open_at = datetime(2026, 12, 7, 9, 59, 30, tzinfo=UTC)  # a Monday, in 9:00-10:00
    policy = Policy(windows=[TimeWindow(weekdays=[0], start_hour=9, end_hour=10)])
    clock = [open_at]
    wire, audit = _wire(_view(policy, "admin", None), clock)
    assert _injected(await wire.plan(_request()))
    clock[0] = open_at + timedelta(seconds=31)  # 10:00:01: the same connection's next request
    refused = await wire.plan(_request())
    assert isinstance(refused, Denied) and refused.status == 403, refused
    assert [r.decision for r in audit.records] == ["deny: credential policy denies"]
