"""Per-org admission counts, taken under a lock on the org's row so that two
concurrent admissions can never both take the last place.

`lock_org` must be the first statement of its transaction: on PostgreSQL it
takes the org row's lock, on SQLite the database write lock (a first write
waits on the busy timeout; a read first would leave a stale snapshot). The
caller then counts and inserts in the same transaction.
"""

from __future__ import annotations

from sqlalchemy import bindparam, case, func, select, update
from sqlalchemy.orm import Session

from space.store.commands import CommandState
from space.store.errors import StoreError
from space.store.models import Command, Org, Sandbox
from space.store.states import SandboxState
from space.store.templates import TemplateRepo
from space.store.volumes import VolumeRepo

#: States that hold a place under the quota: everything not on its way out.
NOT_LIVE = (SandboxState.DELETING.value, SandboxState.DELETED.value, SandboxState.ERROR.value)


class QuotaExceeded(StoreError):
    """An org (or sandbox) is at its limit for `quota` (429 `quota_exceeded`)."""

    def __init__(self, quota: str, limit: int, scope: str, detail: str | None = None) -> None:
        super().__init__(f"quota {quota} exceeded: {scope} {detail or f'already has {limit}'}")
        self.quota = quota
        self.limit = limit


# Built once: a statement's construction costs more than its cached execution.
_LOCK_ORG = (
    update(Org)
    .where(Org.id == bindparam("org_id"))
    .values(name=Org.name)
    .execution_options(synchronize_session=False)
)
_LIVE_SANDBOXES = select(func.count()).where(
    Sandbox.org_id == bindparam("org_id"), Sandbox.state.not_in(NOT_LIVE)
)


def lock_org(session: Session, org_id: str) -> None:
    session.execute(_LOCK_ORG, {"org_id": org_id})


def org_name(session: Session, org_id: str) -> str:
    return session.get_one(Org, org_id).name


def live_sandboxes(session: Session, org_id: str) -> int:
    return int(session.scalar(_LIVE_SANDBOXES, {"org_id": org_id}) or 0)


def running_commands(session: Session, org_id: str, sandbox_id: str) -> tuple[int, int]:
    """The org's running commands, and how many of them run in `sandbox_id`: one query."""
    in_sandbox = func.sum(case((Command.sandbox_id == sandbox_id, 1), else_=0))
    query = (
        select(func.count(), in_sandbox)
        .select_from(Command)
        .join(Sandbox, Sandbox.id == Command.sandbox_id)
        .where(Sandbox.org_id == org_id, Command.state == CommandState.RUNNING.value)
    )
    org, sandbox = session.execute(query).one()
    return int(org or 0), int(sandbox or 0)


def admit_sandbox(session: Session, org_id: str, limit: int, count: int = 1) -> None:
    """Lock the org and raise QuotaExceeded unless `count` more live sandboxes fit in
    `limit`."""
    lock_org(session, org_id)
    live = live_sandboxes(session, org_id)
    if live >= limit:
        raise QuotaExceeded("sandboxes_per_org", limit, f"org {org_id}")
    if live + count > limit:
        detail = f"has {live} of {limit} and asks for {count} more"
        raise QuotaExceeded("sandboxes_per_org", limit, f"org {org_id}", detail)


def admit_command(
    session: Session, org_id: str, sandbox_id: str, *, per_org: int, per_sandbox: int
) -> None:
    """Lock the org and raise QuotaExceeded if a running-command limit is reached."""
    lock_org(session, org_id)
    in_org, in_sandbox = running_commands(session, org_id, sandbox_id)
    if in_sandbox >= per_sandbox:
        raise QuotaExceeded("commands_per_sandbox", per_sandbox, f"sandbox {sandbox_id}")
    if in_org >= per_org:
        raise QuotaExceeded("commands_per_org", per_org, f"org {org_id}")


def admit_volume(
    session: Session, org_id: str, size_mb: int, *, count_limit: int, mb_limit: int
) -> None:
    """Lock the org and raise QuotaExceeded unless one more volume of `size_mb` MiB fits
    in its volume count and total size."""
    lock_org(session, org_id)
    count, total = VolumeRepo(session).usage(org_id)
    if count >= count_limit:
        raise QuotaExceeded("volumes_per_org", count_limit, f"org {org_id}")
    if total + size_mb > mb_limit:
        detail = f"has {total} of {mb_limit} MiB of volumes and asks for {size_mb} more"
        raise QuotaExceeded("volume_mb_per_org", mb_limit, f"org {org_id}", detail)


def admit_template(session: Session, org_id: str, name: str, limit: int) -> None:
    """Lock the org and raise QuotaExceeded unless `name` is already the org's or one
    more template fits in `limit`."""
    lock_org(session, org_id)
    owned = TemplateRepo(session).names_of(org_id)
    if name not in owned and len(owned) >= limit:
        raise QuotaExceeded("templates_per_org", limit, f"org {org_id}")
