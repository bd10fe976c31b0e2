"""Idempotent creates: a sandbox remembers the `Idempotency-Key` it was created
under (unique per org) and a digest of the request, so a retry finds it.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sandboxes") as batch:
        batch.add_column(sa.Column("idempotency_key", sa.String(255), nullable=True))
        batch.add_column(sa.Column("request_digest", sa.String(64), nullable=True))
        batch.create_unique_constraint(
            "uq_sandboxes_org_idempotency_key", ["org_id", "idempotency_key"]
        )


def downgrade() -> None:
    with op.batch_alter_table("sandboxes") as batch:
        batch.drop_constraint("uq_sandboxes_org_idempotency_key", type_="unique")
        batch.drop_column("request_digest")
        batch.drop_column("idempotency_key")
