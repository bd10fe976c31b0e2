"""Moved to `space.services.credentials`; only `space.cli.serve` still imports it from here.
Point that import at `space.services.credentials` and delete this module."""

from space.services.credentials import CredentialService

__all__ = ["CredentialService"]
