"""Volumes: `volumes` (an ext4 image on one node, named per org) and the volumes a
sandbox mounts (`sandboxes.volumes`).

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "volumes",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column(
            "org_id", sa.String(32), sa.ForeignKey("orgs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("size_mb", sa.Integer, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("node", sa.String(253), nullable=True),
        sa.Column("clone_of", sa.String(32), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("org_id", "name", name="uq_volumes_org_name"),
    )
    op.create_index("ix_volumes_org_id", "volumes", ["org_id"])
    with op.batch_alter_table("sandboxes") as batch:
        batch.add_column(sa.Column("volumes", sa.JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("sandboxes") as batch:
        batch.drop_column("volumes")
    op.drop_index("ix_volumes_org_id", "volumes")
    op.drop_table("volumes")
