"""Credentials: metadata, sealed versions, narrowing bindings, per-sandbox view
stamps, and the hash-chained audit with its head row.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
GENESIS = "0" * 64


def upgrade() -> None:
    op.create_table(
        "credentials",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column(
            "org_id", sa.String(32), sa.ForeignKey("orgs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("target", sa.String(128), nullable=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("application", sa.JSON(), nullable=False),
        sa.Column("binding", sa.JSON(), nullable=False),
        sa.Column("policy", sa.JSON(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_by", sa.String(32), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.Column("expires_at", TS, nullable=True),
        sa.Column("revoked_at", TS, nullable=True),
        sa.UniqueConstraint("org_id", "name", name="uq_credentials_org_name"),
    )
    op.create_index("ix_credentials_org_id", "credentials", ["org_id"])
    op.create_table(
        "credential_versions",
        sa.Column(
            "credential_id",
            sa.String(32),
            sa.ForeignKey("credentials.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("version", sa.Integer(), primary_key=True),
        sa.Column("sealed", sa.Text(), nullable=False),
        sa.Column("fingerprint", sa.String(16), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("usable_until", TS, nullable=True),
    )
    op.create_table(
        "credential_bindings",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column(
            "credential_id",
            sa.String(32),
            sa.ForeignKey("credentials.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("target", sa.String(128), nullable=False),
        sa.Column("binding", sa.JSON(), nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.UniqueConstraint("credential_id", "scope", "target", name="uq_credential_bindings"),
    )
    op.create_index(
        "ix_credential_bindings_credential_id", "credential_bindings", ["credential_id"]
    )
    op.create_table(
        "credential_views",
        sa.Column(
            "sandbox_id",
            sa.String(32),
            sa.ForeignKey("sandboxes.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
    )
    op.create_table(
        "credential_audit",
        sa.Column("seq", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("at", TS, nullable=False),
        sa.Column("org_id", sa.String(32), nullable=False),
        sa.Column("who", sa.String(64), nullable=False),
        sa.Column("decision", sa.String(32), nullable=False),
        sa.Column("sandbox_id", sa.String(32), nullable=True),
        sa.Column("credential_id", sa.String(32), nullable=True),
        sa.Column("host", sa.String(253), nullable=True),
        sa.Column("method", sa.String(16), nullable=True),
        sa.Column("path", sa.Text(), nullable=True),
        sa.Column("latency_ms", sa.Float(), nullable=True),
        sa.Column("prev_hash", sa.String(64), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
    )
    for column in ("at", "org_id", "decision", "sandbox_id", "credential_id"):
        op.create_index(f"ix_credential_audit_{column}", "credential_audit", [column])
    head = op.create_table(
        "credential_audit_head",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
    )
    op.bulk_insert(head, [{"id": 1, "seq": 0, "hash": GENESIS}])


def downgrade() -> None:
    op.drop_table("credential_audit_head")
    for column in ("at", "org_id", "decision", "sandbox_id", "credential_id"):
        op.drop_index(f"ix_credential_audit_{column}", table_name="credential_audit")
    op.drop_table("credential_audit")
    op.drop_table("credential_views")
    op.drop_index("ix_credential_bindings_credential_id", table_name="credential_bindings")
    op.drop_table("credential_bindings")
    op.drop_table("credential_versions")
    op.drop_index("ix_credentials_org_id", table_name="credentials")
    op.drop_table("credentials")
