"""The control plane copies each node gateway's credential audit chain into its own:
`credential_audit_cursors` remembers, per chain, the last seq copied (in the same
transaction as the copies, so each record lands once); a decision holds the gateway's
reason (`deny: <why>`), so it is wider.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "credential_audit_cursors",
        sa.Column("source", sa.String(128), primary_key=True),
        sa.Column("seq", sa.Integer(), nullable=False),
    )
    with op.batch_alter_table("credential_audit") as batch:
        batch.alter_column("decision", type_=sa.String(255), existing_type=sa.String(32))


def downgrade() -> None:
    with op.batch_alter_table("credential_audit") as batch:
        batch.alter_column("decision", type_=sa.String(32), existing_type=sa.String(255))
    op.drop_table("credential_audit_cursors")
