"""`GET /v1/sandboxes/{id}/egress`: the sandbox's newest egress decisions (the gateway's
audit: one record per DNS question, TLS handshake and request, with the rule and the
policy version it was decided on; never a query string, body or header value).

A read: it does not wake the sandbox or count as activity. The node keeps a bounded
ring of records, so old ones fall out; the node's `space.gateway.audit` log has them all.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel

from space.api.deps import SandboxDep, StateDep
from space.seam.errors import SandboxNotFound

router = APIRouter(prefix="/v1/sandboxes/{sandbox_id}", tags=["egress"])

MAX_RECORDS = 1000


class EgressRecordOut(BaseModel):
    at: float
    kind: str
    decision: str
    reason: str
    policy_version: int
    host: str | None = None
    sni: str | None = None
    address: str | None = None
    method: str | None = None
    path: str | None = None
    rule: str | None = None
    status: int | None = None


class EgressAudit(BaseModel):
    records: list[EgressRecordOut]


@router.get("/egress")
async def egress_audit(
    sandbox: SandboxDep,
    state: StateDep,
    limit: Annotated[int, Query(ge=1, le=MAX_RECORDS)] = 100,
) -> EgressAudit:
    """Newest first, at most `limit` (1..1000)."""
    try:
        records = await state.node.egress_audit(sandbox.id, limit)
    except SandboxNotFound:  # not on the node (yet, or any more): it has sent nothing
        records = []
    return EgressAudit(
        records=[EgressRecordOut.model_validate(r, from_attributes=True) for r in records]
    )
