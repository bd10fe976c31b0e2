"""Snapshots to templates, for both fronts: a running sandbox's disk becomes the
newest version of a template the org owns (`store/templates.py`).

A name is refused (409 `template_name_taken`, field `name`) when it is built in or an
operator's (the node lists it and no org owns it) or another org's; the org owns it
from its first snapshot or build on. 429 `quota_exceeded` when the org is at its
templates, template versions or template MiB (`services/quotas.py`). The node syncs the
guest, reflinks its disk while it is paused for an instant and registers it; the
source runs on.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from space.api.state import AppState
from space.services import quotas
from space.services.access import require
from space.services.errors import Conflict
from space.store.keys import Principal
from space.store.models import Sandbox
from space.store.templates import TemplateNameTaken, TemplateRepo


@dataclass(frozen=True)
class Snapshot:
    name: str
    digest: str
    source: str


async def snapshot(state: AppState, principal: Principal, sandbox: Sandbox, name: str) -> Snapshot:
    require(principal, "templates.write")
    node = state.node
    known = await node.templates()
    usage = await node.template_usage(own_templates(state, principal.org_id))
    quotas.admit_template_version(state.settings.quotas, principal, usage)
    await asyncio.to_thread(_claim, state, principal, name, known)
    digest = await node.snapshot_template(sandbox.id, name)
    return Snapshot(name, digest, sandbox.id)


def own_templates(state: AppState, org_id: str) -> list[str]:
    with state.db.session() as session:
        return TemplateRepo(session).names_of(org_id)


def _claim(state: AppState, principal: Principal, name: str, known: list[str]) -> None:
    with state.db.session() as session:
        quotas.admit_template(session, state.settings.quotas, principal, name)
        repo = TemplateRepo(session)
        if repo.owner(name) is None and name in known:
            raise Conflict(f"template {name!r} is not yours", "name", code="template_name_taken")
        try:
            repo.claim(principal.org_id, name)
        except TemplateNameTaken as exc:
            raise Conflict(str(exc), "name", code="template_name_taken") from None
