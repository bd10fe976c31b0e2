"""Moved to `space.services.credential_push`; `space.cli` still imports it from here until the
CLI's own move (its package) lands. Nothing else may import this module."""

from space.services.credential_push import CredentialPush

__all__ = ["CredentialPush"]
