"""A sandbox remembers the node it was placed on (many-node deployments); NULL: not
placed, or made by a single node.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sandboxes") as batch:
        batch.add_column(sa.Column("node", sa.String(253), nullable=True))
        batch.create_index("ix_sandboxes_node", ["node"])


def downgrade() -> None:
    with op.batch_alter_table("sandboxes") as batch:
        batch.drop_index("ix_sandboxes_node")
        batch.drop_column("node")
