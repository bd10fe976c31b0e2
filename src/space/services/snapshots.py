"""`SnapshotService`: snapshots to templates, for both fronts: a running sandbox's
disk becomes the newest version of a template the org owns (`store/templates.py`).

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

from space.config.quotas import QuotaConfig
from space.control.errors import NodeUnavailable
from space.seam.protocol import NodeClient
from space.services import quotas
from space.services.access import require
from space.services.errors import Conflict
from space.store.db import Database
from space.store.keys import Principal
from space.store.models import Sandbox
from space.store.templates import TemplateNameTaken, TemplateRepo


@dataclass(frozen=True)
class Snapshot:
    name: str
    digest: str
    source: str


class SnapshotService:
    """Over the database, the org quotas and the node (None on an API-only replica:
    `NodeUnavailable`)."""

    def __init__(self, *, db: Database, quotas: QuotaConfig, node: NodeClient | None) -> None:
        self._db = db
        self._quotas = quotas
        self._node = node

    async def snapshot(self, principal: Principal, sandbox: Sandbox, name: str) -> Snapshot:
        require(principal, "templates.write")
        if self._node is None:
            raise NodeUnavailable()
        node = self._node
        known = await node.templates()
        usage = await node.template_usage(self.own_templates(principal.org_id))
        quotas.admit_template_version(self._quotas, principal, usage)
        await asyncio.to_thread(self._claim, principal, name, known)
        digest = await node.snapshot_template(sandbox.id, name)
        return Snapshot(name, digest, sandbox.id)

    def own_templates(self, org_id: str) -> list[str]:
        with self._db.session() as session:
            return TemplateRepo(session).names_of(org_id)

    def _claim(self, principal: Principal, name: str, known: list[str]) -> None:
        with self._db.session() as session:
            quotas.admit_template(session, self._quotas, principal, name)
            repo = TemplateRepo(session)
            if repo.owner(name) is None and name in known:
                message = f"template {name!r} is not yours"
                raise Conflict(message, "name", code="template_name_taken")
            try:
                repo.claim(principal.org_id, name)
            except TemplateNameTaken as exc:
                raise Conflict(str(exc), "name", code="template_name_taken") from None
