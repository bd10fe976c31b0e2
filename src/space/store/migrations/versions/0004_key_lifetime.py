"""API keys can expire (`expires_at`) and be revoked (`revoked_at`).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("expires_at", TS, nullable=True))
        batch.add_column(sa.Column("revoked_at", TS, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("revoked_at")
        batch.drop_column("expires_at")
