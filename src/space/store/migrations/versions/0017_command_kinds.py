"""`commands.logged` (its node keeps its output log: false for an `exec`, whose answer
carries the output) and `commands.pty` (started with a terminal, so it can be resized).

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "commands", sa.Column("logged", sa.Boolean(), nullable=False, server_default=sa.true())
    )
    op.add_column(
        "commands", sa.Column("pty", sa.Boolean(), nullable=False, server_default=sa.false())
    )


def downgrade() -> None:
    with op.batch_alter_table("commands") as batch:
        batch.drop_column("pty")
        batch.drop_column("logged")
