"""`SandboxService`: what a sandbox is asked to do, for both fronts (`/v1`, E2B).

Create (bounds, template, egress policy against the org's default and ceiling,
quota admission, the volumes it mounts (`services.volumes.resolve_mounts`) and the
row in one transaction, then `Lifecycle.ensure_created`),
fork (the source running, quota for every fork and their rows in one transaction,
then `Lifecycle.ensure_forked`), a running sandbox's new egress policy (node first,
then the row), delete
(`deleting`, `ensure_deleted`, then the sandbox's processes and logs in the
process registry), list and get in the caller's org, power operations and
the deadline. The fronts only translate their bodies in and their shapes out.

Refusals are `services.errors` (their kind, code, message, field); each front maps
them to its own error shape (the statuses below are `/v1`'s):

    422 out_of_bounds           timeout / idle_timeout past SPACE_LIMITS_TIMEOUT
    422 unknown_template        the node has no such template, or another org owns it
                                (field `template`)
    422 invalid_network_policy  beyond the org's ceiling, or malformed (`network`)
    422 unknown_credential      `credentials.<i>`: no credential of the org of that
                                name reaches the sandbox, or it is listed twice
    422 unknown_secret          a use (`SecretUse.where`) names no `rules` credential
                                (E2B secret) of the org
    429 quota_exceeded          the org is at its sandbox limit (`services.quotas`)
    422/409 ...                 `volumes`: see `services.volumes`
    502 sandbox_create_failed   the node could not create it (the reason)
    409 conflict                it was deleted while being created
    422 idempotency_key_reused  the key was used for a different request
    409 conflict                the sandbox created under the key was deleted since
    422 out_of_bounds           fork: `count` not 1..16 (field `count`)
    409 sandbox_not_running     fork: the source is not running
    409 sandbox_busy            settled: still creating, suspending or restoring
                                after the create timeout
    409 sandbox_has_volumes     fork: the source mounts volumes (its forks would share them)
    429 quota_exceeded          fork: the org has no room for `count` more sandboxes
    502 sandbox_fork_failed     fork: the node could not fork it (every fork is `error`)

A create under an `Idempotency-Key` (unique per org) happens once: a retry with
the key and the same request waits for and answers that sandbox (no second place
under the quota), also while the first request is still creating it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, TypeVar

from pydantic import BaseModel
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from space.config import Settings
from space.control.errors import NodeUnavailable
from space.control.expiry import lifetime_until
from space.control.power import PowerOp
from space.control.waiter import Lifecycle
from space.credentials.model import CredentialUse, HeaderApply, RulesApply
from space.credentials.scopes import SandboxRef, fenced_in
from space.egress.policy import PolicyError
from space.seam.protocol import NodeClient
from space.services.credential_push import CredentialPush
from space.services.errors import Conflict, Failed, Forbidden, Invalid, out_of_bounds
from space.services.processes import ProcessRegistry
from space.services.quotas import admit_sandbox
from space.services.volumes import MountRequest, resolve_mounts
from space.store import roles
from space.store.credentials import CredentialRepo
from space.store.db import Database
from space.store.errors import InvalidTransition, NotFound
from space.store.keys import Principal
from space.store.models import Project, Sandbox
from space.store.sandboxes import NewSandbox, SandboxRepo
from space.store.states import DesiredState, SandboxState
from space.store.templates import TemplateRepo

FORK_MAX = 16  # sandboxes per fork call (the node's bound too)
#: The states a sandbox passes through on its way to another, which `settled` waits out.
MOVING = frozenset({SandboxState.CREATING, SandboxState.SUSPENDING, SandboxState.RESTORING})
SETTLE_POLL_SECONDS = 0.25

log = logging.getLogger(__name__)
T = TypeVar("T")


def _dumped(value: object) -> object:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    raise TypeError(f"{type(value).__name__} is not JSON")


@dataclass(frozen=True)
class SecretUse:
    """A sandbox's use of the `rules` credential `name`: `application` on `host`;
    `where` is the field of the front's body that asked for it (a refusal names it)."""

    where: str
    name: str
    host: str
    application: HeaderApply


@dataclass(frozen=True)
class SandboxRequest:
    """A sandbox as a front asks for it (bodies already validated by the front)."""

    template: str = "base"
    timeout: int | None = None
    on_timeout: Literal["kill", "suspend"] = "kill"
    idle_timeout: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    network: dict[str, Any] | None = None
    credentials: tuple[str, ...] | None = None  # None: all its scopes reach
    uses: tuple[SecretUse, ...] = ()  # of `rules` credentials, by name
    volumes: tuple[MountRequest, ...] = ()  # the org's volumes, by name
    role: str | None = None  # None: the creating key's (`space.store.roles`)
    task_type: str | None = None

    def digest(self) -> str:
        """What identifies the request under an idempotency key. `credentials`,
        `uses`, `volumes`, `role` and `task_type` count only when given, so a retry
        that spans the upgrade adding them still matches."""
        fields = dataclasses.asdict(self)
        if fields["credentials"] is None:
            del fields["credentials"]
        for optional in ("uses", "volumes", "role", "task_type"):
            if not fields[optional]:
                del fields[optional]
        canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), default=_dumped)
        return hashlib.sha256(canonical.encode()).hexdigest()


class SandboxService:
    def __init__(
        self,
        *,
        settings: Settings,
        db: Database,
        node: NodeClient | None,
        lifecycle: Lifecycle,
        processes: ProcessRegistry | None,
        credentials: CredentialPush | None = None,
    ) -> None:
        self._settings = settings
        self._db = db
        self._node = node
        self._lifecycle = lifecycle
        self._processes = processes
        self._credentials = credentials

    async def create(
        self, principal: Principal, request: SandboxRequest, idempotency_key: str | None = None
    ) -> Sandbox:
        """The new sandbox's row once it is running (the one created under
        `idempotency_key` before, if any)."""
        limit = self._settings.limits.timeout
        out_of_bounds("timeout", request.timeout or 0, limit)
        out_of_bounds("idle_timeout", request.idle_timeout or 0, limit)
        await self.validate_template(request.template, principal.org_id)
        role = _role(principal, request)
        new = NewSandbox(
            template=request.template,
            idle_timeout_seconds=request.idle_timeout
            or self._settings.timeouts.idle_for(request.template),
            timeout_seconds=request.timeout,
            on_timeout=request.on_timeout,
            env=request.env,
            metadata=request.metadata,
            network=self.resolve_network(principal, request.network),
            credentials=request.credentials,
            idempotency_key=idempotency_key,
            request_digest=request.digest() if idempotency_key is not None else None,
            key_id=principal.key_id,
            role=role,
            task_type=request.task_type,
        )
        sandbox_id = self._keyed(principal, new) or self._insert(principal, new, request)
        await self._lifecycle.ensure_created(sandbox_id)
        [row], org_holds_credentials = self._read_back(principal, [sandbox_id])
        if row.state == SandboxState.ERROR.value:
            raise Failed(f"sandbox {row.id}: {row.reason}", code="sandbox_create_failed")
        if row.state != SandboxState.RUNNING.value:
            raise Conflict(f"sandbox {row.id} is {row.state}, not running")
        if self._credentials is not None and org_holds_credentials:
            await self._credentials.created(row)
        return row

    async def fork(self, principal: Principal, source: Sandbox, count: int) -> list[Sandbox]:
        """`count` new sandboxes holding `source`'s memory and disk at one instant, in
        its org, each of them running (the source runs on)."""
        if not 1 <= count <= FORK_MAX:
            raise Invalid(f"count: 1 to {FORK_MAX}", "count", code="out_of_bounds")
        self._node_or_unavailable()  # an API-only replica has no node to fork on
        if source.state != SandboxState.RUNNING.value:
            message = f"sandbox {source.id} is {source.state}: only a running sandbox forks"
            raise Conflict(message, code="sandbox_not_running")
        if source.volumes:
            message = f"sandbox {source.id} mounts volumes: a sandbox with volumes does not fork"
            raise Conflict(message, code="sandbox_has_volumes")
        with self._db.session() as session:
            admit_sandbox(session, self._settings.quotas, principal, count)
            ids = [row.id for row in SandboxRepo(session).create_forks(source, count)]
        await self._lifecycle.ensure_forked(source.id, ids)
        rows, org_holds_credentials = self._read_back(principal, ids)
        for row in rows:
            if row.state == SandboxState.ERROR.value:
                raise Failed(f"sandbox {row.id}: {row.reason}", code="sandbox_fork_failed")
            if row.state != SandboxState.RUNNING.value:
                raise Conflict(f"sandbox {row.id} is {row.state}, not running")
        if self._credentials is not None and org_holds_credentials:
            for row in rows:
                await self._credentials.created(row)
        return rows

    def _read_back(self, principal: Principal, ids: list[str]) -> tuple[list[Sandbox], bool]:
        """The caller's sandboxes `ids` as the node left them, and whether their org
        holds any credential (their gateways then get a view): one transaction."""
        with self._db.session() as session:
            repo = SandboxRepo(session)
            rows = [repo.visible(principal, sandbox_id) for sandbox_id in ids]
            return rows, CredentialRepo(session).count(principal.org_id) > 0

    def _insert(self, principal: Principal, new: NewSandbox, request: SandboxRequest) -> str:
        """The row, its credentials, quota and volumes checked in its transaction (the
        mounts after the quota's org lock: the one-writer rule holds under it)."""
        try:
            with self._db.session() as session:
                _check_credentials(session, principal, new)
                new = dataclasses.replace(
                    new, credential_uses=_credential_uses(session, principal, request.uses)
                )
                admit_sandbox(session, self._settings.quotas, principal)
                volumes = resolve_mounts(session, principal.org_id, request.volumes)
                new = dataclasses.replace(new, volumes=volumes)
                repo = SandboxRepo(session)
                return repo.create(principal.org_id, principal.project_id, new).id
        except IntegrityError:  # a concurrent request under the same key inserted first
            keyed = self._keyed(principal, new)
            if keyed is None:
                raise
            return keyed

    def _keyed(self, principal: Principal, new: NewSandbox) -> str | None:
        """The sandbox created under `new`'s idempotency key, if one was."""
        if new.idempotency_key is None:
            return None
        with self._db.session() as session:
            row = SandboxRepo(session).by_idempotency_key(principal.org_id, new.idempotency_key)
            if row is None:
                return None
            if row.request_digest != new.request_digest:
                raise Invalid(
                    f"Idempotency-Key was used for a different request (sandbox {row.id})",
                    "Idempotency-Key",
                    code="idempotency_key_reused",
                )
            if row.state == SandboxState.DELETED.value:
                raise Conflict(f"sandbox {row.id}, created under this key, was deleted")
            return row.id

    async def validate_template(self, template: str, org_id: str) -> None:
        """422 unless the org may use `template`: not another org's, and known to the
        node (that part not checked without a node here)."""
        with self._db.session() as session:
            owner = TemplateRepo(session).owner(template)
        known = await self.templates(org_id) if self._node is not None else None
        if owner not in (None, org_id) or (known is not None and template not in known):
            raise Invalid(
                f"no template {template!r}; known: {', '.join(known or ())}",
                "template",
                code="unknown_template",
            )

    async def templates(self, org_id: str) -> list[str]:
        """The templates the node can create sandboxes from, less other orgs' own."""
        names = await self._node_or_unavailable().templates()
        with self._db.session() as session:
            owners = TemplateRepo(session).owners_of(names)
        return [name for name in names if owners.get(name, org_id) == org_id]

    def resolve_network(
        self, principal: Principal, network: dict[str, Any] | None
    ) -> dict[str, Any] | None:
        """The egress policy the sandbox gets: the org's default, or `network` within
        the org's ceiling."""
        try:
            return self._settings.egress.org_policies().resolve(principal.org_name, network)
        except PolicyError as exc:
            raise Invalid(str(exc), "network", code="invalid_network_policy") from exc

    def get(self, principal: Principal, sandbox_id: str) -> Sandbox:
        """The caller's sandbox (another org's is NotFound). A read: not activity."""
        with self._db.session() as session:
            return SandboxRepo(session).visible(principal, sandbox_id)

    def list(self, principal: Principal) -> list[Sandbox]:
        """The sandboxes the caller sees (`space.store.sandboxes.sees`)."""
        with self._db.session() as session:
            return SandboxRepo(session).list_visible(principal)

    async def delete(self, row: Sandbox) -> None:
        """Mark it for deletion, destroy its VM, then end its processes."""
        with self._db.session() as session:
            SandboxRepo(session).transition(
                row.id,
                expected_generation=row.generation,
                to=SandboxState.DELETING,
                desired=DesiredState.DELETED,
            )
        await self._lifecycle.ensure_deleted(row.id)
        if self._processes is not None:
            await self._processes.end_sandbox(row.id)

    async def power(self, row: Sandbox, op: PowerOp) -> Sandbox:
        """Pause, resume, suspend or restore (the node's own timeout: create's)."""
        return await self._lifecycle.power(row, op)

    async def settled(self, principal: Principal, row: Sandbox) -> Sandbox:
        """The caller's sandbox once it is no longer on its way to another state (read
        anew, for at most the create timeout: the transition may run in another process)."""
        give_up = time.monotonic() + self._settings.timeouts.create
        while row.state in MOVING:
            if time.monotonic() >= give_up:
                message = f"sandbox {row.id} is still {row.state}; try again shortly"
                raise Conflict(message, code="sandbox_busy")
            await asyncio.sleep(SETTLE_POLL_SECONDS)
            row = self.get(principal, row.id)
        return row

    def set_deadline(self, row: Sandbox, deadline: datetime) -> Sandbox:
        """The sandbox now ends at `deadline` (earlier or later); not while deleting."""
        if row.state == SandboxState.DELETING.value:
            raise InvalidTransition(row.id, row.state, "a new deadline")
        with self._db.session() as session:
            repo = SandboxRepo(session)
            repo.set_timeout(row.id, lifetime_until(row, deadline))
            return repo.get(row.id)

    async def set_network(
        self,
        principal: Principal,
        row: Sandbox,
        network: dict[str, Any] | None,
        uses: tuple[SecretUse, ...] | None = None,
    ) -> Sandbox:
        """Replace a running sandbox's egress policy (the org's default for None, else
        `network` within the org's ceiling): the node applies it to new and open
        connections, then the row keeps it. `uses`, if given, replace its uses of
        `rules` credentials, and its gateway gets the new view."""
        policy = self.resolve_network(principal, network)
        if row.state != SandboxState.RUNNING.value:
            raise Conflict(f"sandbox {row.id} is {row.state}, not running")
        found = None
        if uses is not None:
            with self._db.session() as session:
                found = _credential_uses(session, principal, uses)
        await self._node_or_unavailable().set_network_policy(row.id, policy)
        with self._db.session() as session:
            repo = SandboxRepo(session)
            repo.set_network(row.id, policy, found)
            row = repo.get(row.id)
        if found is not None and self._credentials is not None:
            await self._credentials.changed(row)
        return row

    def _node_or_unavailable(self) -> NodeClient:
        if self._node is None:
            raise NodeUnavailable()
        return self._node


def _role(principal: Principal, request: SandboxRequest) -> str:
    """The new sandbox's role: the key's, or one it may grant (403 naming `role`); a
    `sandbox`-tier key mounts no volume (403 naming `volumes`)."""
    if request.volumes and not principal.may("volumes"):
        message = f"a key of role {principal.role!r} mounts no volume"
        raise Forbidden(message, "volumes")
    role = request.role or principal.role
    problem = None if principal.is_admin else roles.grants(principal.role, role)
    if problem is not None:
        raise Forbidden(problem, "role")
    return role


def _check_credentials(session: Session, principal: Principal, new: NewSandbox) -> None:
    """422 naming `credentials.<i>` unless each name is a credential of the org whose
    scope reaches the new sandbox (its project and template), listed once."""
    if new.credentials is None:
        return
    project = session.get(Project, principal.project_id) if principal.project_id else None
    ref = SandboxRef("", principal.org_id, project.name if project else None, new.template)
    reached = CredentialRepo(session).names_reaching(ref)
    for i, name in enumerate(new.credentials):
        if name in new.credentials[:i]:
            why = "is listed twice"
        elif name not in reached:
            why = "is no credential of the org whose scope reaches this sandbox"
        else:
            continue
        field = f"credentials.{i}"
        raise Invalid(f"{field}: {name!r} {why}", field, code="unknown_credential")


def _credential_uses(
    session: Session, principal: Principal, uses: tuple[SecretUse, ...]
) -> tuple[CredentialUse, ...]:
    """Each use with its credential's id; 422 naming its field unless the name is a
    `rules` credential of the org."""
    repo, found = CredentialRepo(session), []
    for use in uses:
        try:
            credential = repo.by_name(principal.org_id, use.name)
        except NotFound:
            credential = None
        if credential is None or not isinstance(credential.application, RulesApply):
            message = f"{use.where}: no secret named {use.name!r} in this org"
            raise Invalid(message, use.where, code="unknown_secret")
        if not fenced_in(credential.application, use.host):
            message = (
                f"{use.where}: secret {use.name!r} is fenced to {credential.application.hosts}"
            )
            raise Forbidden(message, use.where, code="outside_fence")
        found.append(CredentialUse(credential.id, use.host, use.application))
    return tuple(found)


def rendered(rows: list[Sandbox], render: Callable[[Sandbox], T]) -> list[T]:
    """Each row rendered in a front's shape; one that cannot be (a corrupt row) is
    logged and left out of the list."""
    out: list[T] = []
    for row in rows:
        try:
            out.append(render(row))
        except (ValueError, TypeError, OverflowError):
            log.exception("sandbox %s cannot be shown, leaving it out of the list", row.id)
    return out
