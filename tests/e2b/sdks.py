"""The E2B SDK versions the wide scripts run under, and how a script runs under one.

`e2b==2.21.1` is .venv's own (pyproject); the current one, 2.63.0, lives in
`.venv/sdk/e2b-<version>` (scripts/bootstrap, never committed): both cannot be
imported in one interpreter, so a script runs under it in a pytest subprocess with
that directory first on PYTHONPATH. `SPACE_TEST_E2B_SDK` names the version the
subprocess must have imported (tests/e2b/conftest.py checks it).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CURRENT = "2.63.0"
EXPECTED_ENV = "SPACE_TEST_E2B_SDK"


def sdk_dir(version: str) -> Path:
    """The SDK's directory; a missing one fails the test (run scripts/bootstrap)."""
    path = ROOT / ".venv" / "sdk" / f"e2b-{version}"
    if not (path / "e2b" / "__init__.py").is_file():
        raise AssertionError(f"e2b=={version} is not installed in {path}: run scripts/bootstrap")
    return path


def run_pytest_under(
    version: str, targets: list[str], *, timeout: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`pytest targets` with e2b==version, its output captured."""
    child_env = {**os.environ, **(env or {})}
    child_env["PYTHONPATH"] = os.pathsep.join(
        [str(sdk_dir(version)), *filter(None, [child_env.get("PYTHONPATH")])]
    )
    child_env[EXPECTED_ENV] = version
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
        + targets,
        cwd=ROOT,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
