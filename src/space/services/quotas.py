"""Per-org quotas at admission: a sandbox create, a process start, a volume, or a new
template version (a build or a snapshot) is refused with `QuotaExceeded` (429
`quota_exceeded`; the `field` names the quota) when the org or sandbox is at its limit.
Count and insert share one transaction under the org's lock (`store.quotas`), so
concurrent admissions never overshoot; a template's versions and bytes are what its
nodes report (`template_usage`), so builds and snapshots admitted at once may each add
one version past them."""

from __future__ import annotations

from functools import partial
from typing import Any

from sqlalchemy.orm import Session

from space.config.quotas import QuotaConfig
from space.seam.values import TemplateUsage
from space.services.errors import QuotaExceeded
from space.store import quotas
from space.store.commands import CommandRepo
from space.store.db import Database
from space.store.keys import Principal


def admit_sandbox(
    session: Session, config: QuotaConfig, principal: Principal, count: int = 1
) -> None:
    limits = config.for_org(principal.org_name)
    try:
        quotas.admit_sandbox(session, principal.org_id, limits.sandboxes, count)
    except quotas.QuotaExceeded as exc:
        raise QuotaExceeded(str(exc), exc.quota) from exc


def admit_volume(session: Session, config: QuotaConfig, principal: Principal, size_mb: int) -> None:
    limits = config.for_org(principal.org_name)
    try:
        quotas.admit_volume(
            session,
            principal.org_id,
            size_mb,
            count_limit=limits.volumes,
            mb_limit=limits.volume_mb,
        )
    except quotas.QuotaExceeded as exc:
        raise QuotaExceeded(str(exc), exc.quota) from exc


def admit_template(session: Session, config: QuotaConfig, principal: Principal, name: str) -> None:
    """Under the org's lock: `name` is the org's already, or one more template fits."""
    limit = config.for_org(principal.org_name).templates
    try:
        quotas.admit_template(session, principal.org_id, name, limit)
    except quotas.QuotaExceeded as exc:
        raise QuotaExceeded(str(exc), exc.quota) from exc


def admit_template_version(config: QuotaConfig, principal: Principal, usage: TemplateUsage) -> None:
    """One more version fits beside the `usage` of the org's templates."""
    limits = config.for_org(principal.org_name)
    scope = f"org {principal.org_id}"
    if usage.versions >= limits.template_versions:
        exc = quotas.QuotaExceeded("template_versions_per_org", limits.template_versions, scope)
        raise QuotaExceeded(str(exc), exc.quota)
    if usage.bytes >= limits.template_mb << 20:
        held = f"holds {usage.bytes >> 20} of {limits.template_mb} MiB of template versions"
        exc = quotas.QuotaExceeded("template_mb_per_org", limits.template_mb, scope, held)
        raise QuotaExceeded(str(exc), exc.quota)


def admit_command(session: Session, config: QuotaConfig, org_id: str, sandbox_id: str) -> None:
    name = quotas.org_name(session, org_id) if config.orgs else ""  # only overrides need it
    limits = config.for_org(name)
    try:
        quotas.admit_command(
            session,
            org_id,
            sandbox_id,
            per_org=limits.commands,
            per_sandbox=limits.commands_per_sandbox,
        )
    except quotas.QuotaExceeded as exc:
        raise QuotaExceeded(str(exc), exc.quota) from exc


def reserve_command(
    db: Database,
    config: QuotaConfig,
    org_id: str,
    sandbox_id: str,
    argv: dict[str, Any],
    *,
    logged: bool = True,
    pty: bool = False,
) -> str:
    """A `commands` row holding one place under the quota for a process about to start
    (429 if none); `logged`: its node keeps its output log (not an `exec`)."""
    with db.session() as session:
        admit_command(session, config, org_id, sandbox_id)
        return CommandRepo(session).create(sandbox_id, argv, logged=logged, pty=pty).id


def release_command(db: Database, command_id: str, exit_code: int | None = None) -> None:
    """Free its place (now, or once a database outage is over)."""
    db.write_soon(partial(_finish, command_id, exit_code), f"exit of command {command_id}")


def _finish(command_id: str, exit_code: int | None, session: Session) -> None:
    CommandRepo(session).finish(command_id, exit_code)
