"""Templates from recipes: `template_names` (which org owns a name it built) and
`template_builds` (each build: its spec, state, node and log).

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "template_names",
        sa.Column("name", sa.String(63), primary_key=True),
        sa.Column(
            "org_id", sa.String(32), sa.ForeignKey("orgs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_index("ix_template_names_org_id", "template_names", ["org_id"])
    op.create_table(
        "template_builds",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column(
            "org_id", sa.String(32), sa.ForeignKey("orgs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.Column("node", sa.String(253), nullable=True),
        sa.Column("log", sa.Text, nullable=False),
        sa.Column("log_next", sa.Integer, nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("digest", sa.String(64), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
    )
    for column in ("org_id", "name", "state"):
        op.create_index(f"ix_template_builds_{column}", "template_builds", [column])


def downgrade() -> None:
    op.drop_table("template_builds")
    op.drop_table("template_names")
