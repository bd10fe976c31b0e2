"""Moved to `space.services.audit_copy`; only `space.cli.serve` still imports it from here.
Point that import at `space.services.audit_copy` and delete this module."""

from space.services.audit_copy import AuditCopy

__all__ = ["AuditCopy"]
