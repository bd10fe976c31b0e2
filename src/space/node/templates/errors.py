"""Errors raised while building guest artifacts and templates.

BuildError            a build step failed (command, parse or validation error)
 +-- ModuleResolveError   a kernel module or its dependency is missing or cyclic
 +-- ImageError           a container image cannot be imported: unreadable, a digest or
                          size that does not match, past a limit, or a hostile layer
"""

from __future__ import annotations


class BuildError(RuntimeError):
    """A build step failed; the message names the step and what went wrong."""


class ModuleResolveError(BuildError):
    """A required kernel module is missing from modules.dep, or its deps form a cycle."""


class ImageError(BuildError):
    """A container image was refused; the message names the blob, member or limit."""
