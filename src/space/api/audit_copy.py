"""Moved to `space.services.audit_copy`; `space.cli` still imports it from here until the
CLI's own move (its package) lands. Nothing else may import this module."""

from space.services.audit_copy import AuditCopy

__all__ = ["AuditCopy"]
