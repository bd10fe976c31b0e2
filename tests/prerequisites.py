"""What a test needs from the machine: skipped without it, except in CI.

Under `SPACE_CI` (set by `.ci/run`) a missing prerequisite fails the test: CI
installs everything (`scripts/bootstrap`), so a skip there would hide a broken
install and a suite that silently tests less.
"""

from __future__ import annotations

import os
import shutil
from typing import NoReturn

import pytest


def missing(reason: str) -> NoReturn:
    """Fail under SPACE_CI, else skip, saying what is missing and how to get it."""
    if os.environ.get("SPACE_CI"):
        pytest.fail(f"SPACE_CI: {reason}")
    pytest.skip(reason)


def require_tool(name: str, install: str) -> str:
    """The path of command `name`, else `missing` (`install` says how to get it)."""
    path = shutil.which(name)
    if path is None:
        missing(f"needs {name} ({install})")
    return path


def require_root(why: str) -> None:
    if os.geteuid() != 0:
        missing(f"needs root: {why}")
