"""Credential views reach the gateways of running sandboxes.

A sandbox's view (`CredentialRepo.view`: versioned, no values) and the values of
its entries (revealed here, on the control plane) go to the node as one
`CredentialGrant` (`NodeClient.set_credentials`): when a sandbox has just been
created, if its org holds any credential, after every credential change
(create, rotate, revoke, bind, delete) to every running sandbox of the org, and
when a running sandbox's own uses of `rules` credentials are replaced. The
gateway applies a newer version from the next request and ignores an older one.

A push that fails (node gone, timeout, a value that no longer opens) is logged for
that sandbox alone and never fails the API call that caused it. `resync`, run by
the controller after every reconcile pass, is the backstop: a running sandbox whose
gateway holds an older version than the one stamped for it (a failed push), or none
(a node restart forgets every view), gets its view again. Without a node in this
process (`space api` as a replica) nothing is pushed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from sqlalchemy import select

from space.seam.protocol import NodeClient
from space.seam.values import CredentialGrant, SandboxObservation
from space.services.credentials import CredentialService
from space.store.credentials import CredentialRepo
from space.store.db import Database
from space.store.models import CredentialView as ViewRow
from space.store.models import Org, Sandbox, utcnow
from space.store.sandboxes import SandboxRepo
from space.store.states import SandboxState

log = logging.getLogger(__name__)


class CredentialPush:
    def __init__(
        self, service: CredentialService, db: Database, node: NodeClient | None, timeout: float
    ) -> None:
        self._service = service
        self._db = db
        self._node = node
        self._timeout = timeout

    async def created(self, row: Sandbox) -> None:
        """A new sandbox of an org that holds credentials runs: hand its gateway its view."""
        await self._push(row)

    async def changed(self, row: Sandbox) -> None:
        """The sandbox's own inputs to its view changed (its uses): it gets its view."""
        await self._push(row)

    async def org_changed(self, org_name: str) -> None:
        """A credential of the org changed: every running sandbox of it gets its view."""
        with self._db.session() as session:
            org_id = session.scalar(select(Org.id).where(Org.name == org_name))
            rows = SandboxRepo(session).list_for_org(org_id) if org_id else []
        running = [r for r in rows if r.state == SandboxState.RUNNING.value]
        await asyncio.gather(*(self._push(row) for row in running))

    async def resync(self, observed: Sequence[SandboxObservation]) -> None:
        """Push again to every running sandbox whose gateway is behind its stamped view."""
        held = {o.sandbox_id: o.credentials_version for o in observed if o.state == "running"}
        if self._node is None or not held:
            return
        behind = await asyncio.to_thread(self._behind, held)
        for row in behind:
            log.info("credentials: sandbox %s's gateway is behind its view, pushing", row.id)
        await asyncio.gather(*(self._push(row) for row in behind))

    def _behind(self, held: dict[str, int | None]) -> list[Sandbox]:
        with self._db.session() as session:
            stamps = session.execute(
                select(ViewRow.sandbox_id, ViewRow.version).where(ViewRow.sandbox_id.in_(held))
            )
            ids = [sid for sid, version in stamps if (held[sid] or 0) < version]
            rows = session.scalars(select(Sandbox).where(Sandbox.id.in_(ids))).all() if ids else []
        return [r for r in rows if r.state == SandboxState.RUNNING.value]

    async def _push(self, row: Sandbox) -> None:
        if self._node is None:
            return
        try:
            grant = await asyncio.to_thread(self._grant, row)
            async with asyncio.timeout(self._timeout):
                await self._node.set_credentials(row.id, grant)
        except Exception as exc:  # this sandbox keeps its previous view; the rest go on
            log.error("credentials: sandbox %s did not get its new view: %s", row.id, exc)

    def _grant(self, row: Sandbox) -> CredentialGrant:
        """The view and its values."""
        service, now = self._service, utcnow()
        with self._db.session() as session:
            repo = CredentialRepo(session)
            view = repo.view(service.sandbox_ref(session, row), service.placeholder_secret, now)
            values = {
                CredentialGrant.key(e.credential_id, e.value_version): repo.reveal(
                    e.credential_id, e.value_version, service.keys, now
                )
                for e in view.entries
            }
        return CredentialGrant(row.org_id, view.to_json(), values)
