"""`secret_fingerprints`: what every control-plane process must agree on (the
credential placeholder key and each sealing key, as one-way fingerprints), recorded
by the first process that uses each.

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "secret_fingerprints",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("secret_fingerprints")
