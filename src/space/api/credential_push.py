"""Credential views reach the gateways of running sandboxes.

A sandbox's view (`CredentialRepo.view`: versioned, no values) and the values of
its entries (revealed here, on the control plane) go to the node as one
`CredentialGrant` (`NodeClient.set_credentials`): when a sandbox has just been
created, if its org holds any credential, and after every credential change
(create, rotate, revoke, bind, delete) to every running sandbox of the org. The
gateway applies a newer version from the next request and ignores an older one.

A push that fails (node gone, timeout, a value that no longer opens) is logged for
that sandbox alone and never fails the API call that caused it; the sandbox keeps
the view it had until the next change reaches it. Without a node in this process
(`space api` as a replica) nothing is pushed.
"""

from __future__ import annotations

import asyncio
import logging

from sqlalchemy import select

from space.api.credential_service import CredentialService
from space.seam.protocol import NodeClient
from space.seam.values import CredentialGrant
from space.store.credentials import CredentialRepo
from space.store.db import Database
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
        """A new sandbox runs: hand its gateway its view, if its org has credentials."""
        await self._push(row, only_with_credentials=True)

    async def org_changed(self, org_name: str) -> None:
        """A credential of the org changed: every running sandbox of it gets its view."""
        with self._db.session() as session:
            org_id = session.scalar(select(Org.id).where(Org.name == org_name))
            rows = SandboxRepo(session).list_for_org(org_id) if org_id else []
        running = [r for r in rows if r.state == SandboxState.RUNNING.value]
        await asyncio.gather(*(self._push(row) for row in running))

    async def _push(self, row: Sandbox, *, only_with_credentials: bool = False) -> None:
        if self._node is None:
            return
        try:
            grant = await asyncio.to_thread(self._grant, row, only_with_credentials)
            if grant is None:
                return
            async with asyncio.timeout(self._timeout):
                await self._node.set_credentials(row.id, grant)
        except Exception as exc:  # this sandbox keeps its previous view; the rest go on
            log.error("credentials: sandbox %s did not get its new view: %s", row.id, exc)

    def _grant(self, row: Sandbox, only_with_credentials: bool) -> CredentialGrant | None:
        """The view and its values; None if asked `only_with_credentials` and the org
        holds none (a create then stamps no view)."""
        service, now = self._service, utcnow()
        with self._db.session() as session:
            repo = CredentialRepo(session)
            if only_with_credentials and repo.count(row.org_id) == 0:
                return None
            view = repo.view(service.sandbox_ref(session, row), service.placeholder_secret, now)
            values = {
                CredentialGrant.key(e.credential_id, e.value_version): repo.reveal(
                    e.credential_id, e.value_version, service.keys, now
                )
                for e in view.entries
            }
        return CredentialGrant(row.org_id, view.to_json(), values)
