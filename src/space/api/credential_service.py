"""Moved to `space.services.credentials`; `space.cli` still imports it from here until the
CLI's own move (its package) lands. Nothing else may import this module."""

from space.services.credentials import CredentialService

__all__ = ["CredentialService"]
