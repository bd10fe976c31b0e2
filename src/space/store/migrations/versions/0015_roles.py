"""Roles: `api_keys.role` (every key made before is `admin`, as it could do all an
admin does), and on `sandboxes` the creating key, the role its credentials are
judged by and its task type (None on sandboxes made before: a credential limited
to a role or task type never reaches them).

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("role", sa.String(63), nullable=False, server_default="admin"))
    with op.batch_alter_table("sandboxes") as batch:
        batch.add_column(sa.Column("key_id", sa.String(32), nullable=True))
        batch.add_column(sa.Column("role", sa.String(63), nullable=True))
        batch.add_column(sa.Column("task_type", sa.String(128), nullable=True))
        batch.create_index("ix_sandboxes_key_id", ["key_id"])


def downgrade() -> None:
    with op.batch_alter_table("sandboxes") as batch:
        batch.drop_index("ix_sandboxes_key_id")
        batch.drop_column("task_type")
        batch.drop_column("role")
        batch.drop_column("key_id")
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("role")
