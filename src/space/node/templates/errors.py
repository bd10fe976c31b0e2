"""Errors raised while building guest artifacts and templates.

BuildError            a build step failed (command, parse or validation error)
 +-- ModuleResolveError   a kernel module or its dependency is missing or cyclic
"""

from __future__ import annotations


class BuildError(RuntimeError):
    """A build step failed; the message names the step and what went wrong."""


class ModuleResolveError(BuildError):
    """A required kernel module is missing from modules.dep, or its deps form a cycle."""
