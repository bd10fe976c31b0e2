"""Sandboxes (desired/observed state, generation, activity) and their commands.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "sandboxes",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column(
            "org_id", sa.String(32), sa.ForeignKey("orgs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column(
            "project_id",
            sa.String(32),
            sa.ForeignKey("projects.id", ondelete="SET NULL"),
            nullable=True,
        ),
        sa.Column("template", sa.String(128), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("desired_state", sa.String(16), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("env", sa.JSON(), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("network", sa.JSON(), nullable=True),
        sa.Column("timeout_seconds", sa.Integer(), nullable=True),
        sa.Column("idle_timeout_seconds", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.Column("last_activity_at", TS, nullable=False),
    )
    op.create_index("ix_sandboxes_org_id", "sandboxes", ["org_id"])
    op.create_index("ix_sandboxes_state", "sandboxes", ["state"])
    op.create_table(
        "commands",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column(
            "sandbox_id",
            sa.String(32),
            sa.ForeignKey("sandboxes.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("argv", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("finished_at", TS, nullable=True),
    )
    op.create_index("ix_commands_sandbox_id", "commands", ["sandbox_id"])


def downgrade() -> None:
    op.drop_table("commands")
    op.drop_table("sandboxes")
