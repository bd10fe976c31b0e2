"""SQLAlchemy tables. Only `space.store` imports this module's classes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
    false,
    true,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend (SQLite drops the zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        return value.astimezone(UTC) if value is not None else None

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    pass


class Org(Base):
    __tablename__ = "orgs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Project(Base):
    __tablename__ = "projects"
    __table_args__ = (UniqueConstraint("org_id", "name", name="uq_projects_org_name"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    org_id: Mapped[str] = mapped_column(ForeignKey("orgs.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class ApiKey(Base):
    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    prefix: Mapped[str] = mapped_column(String(16), index=True)
    key_hash: Mapped[str] = mapped_column(String(64))
    org_id: Mapped[str] = mapped_column(ForeignKey("orgs.id", ondelete="CASCADE"), index=True)
    project_id: Mapped[str | None] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), nullable=True
    )
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    #: `space.store.roles`: admin, developer, sandbox, or a custom role's name.
    role: Mapped[str] = mapped_column(String(63), default="admin")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)


class Sandbox(Base):
    __tablename__ = "sandboxes"
    __table_args__ = (
        UniqueConstraint("org_id", "idempotency_key", name="uq_sandboxes_org_idempotency_key"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    org_id: Mapped[str] = mapped_column(ForeignKey("orgs.id", ondelete="CASCADE"), index=True)
    project_id: Mapped[str | None] = mapped_column(
        ForeignKey("projects.id", ondelete="SET NULL"), nullable=True
    )
    template: Mapped[str] = mapped_column(String(128))
    state: Mapped[str] = mapped_column(String(16), index=True)
    desired_state: Mapped[str] = mapped_column(String(16))
    generation: Mapped[int] = mapped_column(Integer, default=1)
    env: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)
    meta: Mapped[dict[str, str]] = mapped_column("metadata", JSON, default=dict)
    network: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    #: The credential names its create asked for (its view holds no others); None: all.
    credentials: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)
    #: Its create's uses of `rules` credentials (`CredentialUse.to_json`); None: none.
    credential_uses: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON, nullable=True)
    timeout_seconds: Mapped[int | None] = mapped_column(Integer, nullable=True)
    idle_timeout_seconds: Mapped[int] = mapped_column(Integer)
    on_timeout: Mapped[str] = mapped_column(String(16), default="kill")
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_activity_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    idempotency_key: Mapped[str | None] = mapped_column(String(255), nullable=True)
    request_digest: Mapped[str | None] = mapped_column(String(64), nullable=True)
    #: The node it was placed on (`space.control.cluster`); None: not placed yet, or
    #: created by a single-node deployment, where there is one node to ask.
    node: Mapped[str | None] = mapped_column(String(253), nullable=True, index=True)
    #: Why a drain's last move of it failed (`space.control.drain`); None: none failed
    #: since its last move.
    move_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    #: The sandbox it was forked from (its memory and disk at the fork); None: a create.
    fork_of: Mapped[str | None] = mapped_column(String(32), nullable=True)
    #: Its volumes, `{"volume_id", "path", "read_only"}` each, in mount order; None: none.
    volumes: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON, nullable=True)
    #: The key that created it (a `sandbox`-tier key sees only its own); None: before 0015.
    key_id: Mapped[str | None] = mapped_column(String(32), nullable=True, index=True)
    #: The role its credentials are judged by (`Policy.roles`): its creator's or narrower.
    role: Mapped[str | None] = mapped_column(String(63), nullable=True)
    #: The task type its create named (`Policy.task_types`); None: none.
    task_type: Mapped[str | None] = mapped_column(String(128), nullable=True)


class Volume(Base):
    """A volume: an ext4 image on one node (`node`) that outlives its sandboxes."""

    __tablename__ = "volumes"
    __table_args__ = (UniqueConstraint("org_id", "name", name="uq_volumes_org_name"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    org_id: Mapped[str] = mapped_column(ForeignKey("orgs.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(63))
    size_mb: Mapped[int] = mapped_column(Integer)
    #: `creating` until its node made it, then `ready`; `deleting` until its node removed it.
    state: Mapped[str] = mapped_column(String(16))
    node: Mapped[str | None] = mapped_column(String(253), nullable=True)
    #: The volume it is a clone of; None: made empty.
    clone_of: Mapped[str | None] = mapped_column(String(32), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Command(Base):
    __tablename__ = "commands"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    sandbox_id: Mapped[str] = mapped_column(
        ForeignKey("sandboxes.id", ondelete="CASCADE"), index=True
    )
    argv: Mapped[dict[str, Any]] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(16))
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    logged: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())
    pty: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


class Node(Base):
    """A host running `space node`: where it is, what it can hold, when it last spoke."""

    __tablename__ = "nodes"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(253), unique=True)
    address: Mapped[str] = mapped_column(String(255))
    state: Mapped[str] = mapped_column(String(16), index=True)
    capacity: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    heartbeat_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Lease(Base):
    """A named lease (the controller's leadership): its holder, fencing term and expiry."""

    __tablename__ = "leases"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(255))
    term: Mapped[int] = mapped_column(Integer)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)


class Credential(Base):
    """A credential's metadata; its values are in `credential_versions`, sealed."""

    __tablename__ = "credentials"
    __table_args__ = (UniqueConstraint("org_id", "name", name="uq_credentials_org_name"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    org_id: Mapped[str] = mapped_column(ForeignKey("orgs.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(128))
    scope: Mapped[str] = mapped_column(String(16))
    target: Mapped[str | None] = mapped_column(String(128), nullable=True)
    kind: Mapped[str] = mapped_column(String(32))
    application: Mapped[dict[str, Any]] = mapped_column(JSON)
    #: None for a `rules` credential (each sandbox's use binds it).
    binding: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    policy: Mapped[dict[str, Any]] = mapped_column(JSON)
    meta: Mapped[dict[str, str] | None] = mapped_column("metadata", JSON, nullable=True)
    version: Mapped[int] = mapped_column(Integer)
    created_by: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)


class CredentialVersion(Base):
    """One value of a credential, sealed (AES-GCM envelope as JSON)."""

    __tablename__ = "credential_versions"

    credential_id: Mapped[str] = mapped_column(
        ForeignKey("credentials.id", ondelete="CASCADE"), primary_key=True
    )
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    sealed: Mapped[str] = mapped_column(Text)
    fingerprint: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    #: None while current; once replaced, the end of its grace period.
    usable_until: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)


class CredentialBinding(Base):
    """A narrowing of a credential's binding at a lower scope, for one target."""

    __tablename__ = "credential_bindings"
    __table_args__ = (
        UniqueConstraint("credential_id", "scope", "target", name="uq_credential_bindings"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    credential_id: Mapped[str] = mapped_column(
        ForeignKey("credentials.id", ondelete="CASCADE"), index=True
    )
    scope: Mapped[str] = mapped_column(String(16))
    target: Mapped[str] = mapped_column(String(128))
    binding: Mapped[dict[str, Any]] = mapped_column(JSON)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class CredentialView(Base):
    """The version a sandbox's credential view was last resolved at, and its digest."""

    __tablename__ = "credential_views"

    sandbox_id: Mapped[str] = mapped_column(
        ForeignKey("sandboxes.id", ondelete="CASCADE"), primary_key=True
    )
    version: Mapped[int] = mapped_column(Integer)
    digest: Mapped[str] = mapped_column(String(64))


class CredentialAudit(Base):
    """One hash-chained audit record (never a value); see `space.credentials.audit`."""

    __tablename__ = "credential_audit"

    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)
    org_id: Mapped[str] = mapped_column(String(32), index=True)
    who: Mapped[str] = mapped_column(String(64))
    decision: Mapped[str] = mapped_column(String(255), index=True)
    sandbox_id: Mapped[str | None] = mapped_column(String(32), nullable=True, index=True)
    credential_id: Mapped[str | None] = mapped_column(String(32), nullable=True, index=True)
    host: Mapped[str | None] = mapped_column(String(253), nullable=True)
    method: Mapped[str | None] = mapped_column(String(16), nullable=True)
    path: Mapped[str | None] = mapped_column(Text, nullable=True)
    latency_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    prev_hash: Mapped[str] = mapped_column(String(64))
    hash: Mapped[str] = mapped_column(String(64))


class CredentialAuditCursor(Base):
    """Per node gateway's audit chain (`source`), the last seq copied into this one."""

    __tablename__ = "credential_audit_cursors"

    source: Mapped[str] = mapped_column(String(128), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer)


class CredentialAuditHead(Base):
    """The audit chain's last seq and hash (one row, locked by each append)."""

    __tablename__ = "credential_audit_head"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    seq: Mapped[int] = mapped_column(Integer)
    hash: Mapped[str] = mapped_column(String(64))


class TemplateName(Base):
    """A template name an org built (`POST /v1/templates`): only that org builds over
    it, deletes it or makes sandboxes of it."""

    __tablename__ = "template_names"

    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    org_id: Mapped[str] = mapped_column(ForeignKey("orgs.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class TemplateBuild(Base):
    """One build of a template from a recipe, run by the leading controller on a node."""

    __tablename__ = "template_builds"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    org_id: Mapped[str] = mapped_column(ForeignKey("orgs.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(63), index=True)
    #: queued, building, ready or failed
    state: Mapped[str] = mapped_column(String(16), index=True)
    #: `BuildSpec` as `space.seam.wire.encode` writes it (the context base64).
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    node: Mapped[str | None] = mapped_column(String(253), nullable=True)
    log: Mapped[str] = mapped_column(Text, default="")
    #: How many of the node's log lines `log` holds (the index to ask the node from).
    log_next: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    digest: Mapped[str | None] = mapped_column(String(64), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class SecretFingerprint(Base):
    """A one-way fingerprint of a secret every control-plane process must share (the
    credential placeholder key, each sealing key by id), recorded by the first process
    that uses it: a process holding another is refused (`services.key_agreement`)."""

    __tablename__ = "secret_fingerprints"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
