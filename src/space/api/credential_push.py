"""Moved to `space.services.credential_push`; only `space.cli.serve` still imports it from here.
Point that import at `space.services.credential_push` and delete this module."""

from space.services.credential_push import CredentialPush

__all__ = ["CredentialPush"]
