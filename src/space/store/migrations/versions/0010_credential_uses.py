"""E2B secrets: a `rules` credential has no binding of its own (NULL), every
credential keeps its owner's metadata, and a sandbox remembers its create's uses
of `rules` credentials (E2B's `network.rules`); NULL: none.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("credentials") as batch:
        batch.alter_column("binding", existing_type=sa.JSON(), nullable=True)
        batch.add_column(sa.Column("metadata", sa.JSON(), nullable=True))
    with op.batch_alter_table("sandboxes") as batch:
        batch.add_column(sa.Column("credential_uses", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("sandboxes") as batch:
        batch.drop_column("credential_uses")
    op.execute("DELETE FROM credentials WHERE binding IS NULL")
    with op.batch_alter_table("credentials") as batch:
        batch.drop_column("metadata")
        batch.alter_column("binding", existing_type=sa.JSON(), nullable=False)
