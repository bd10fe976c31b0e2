"""The wide scripts under the current SDK (e2b==2.63.0, tests/e2b/sdks.py): the
same sync and async scripts .venv's 2.21.1 runs in this process, plus what only
2.63 can call (script_current_sdk.py), each in a pytest subprocess over the fake node."""

from __future__ import annotations

import pytest

from tests.e2b.sdks import CURRENT, run_pytest_under

pytestmark = [pytest.mark.e2b, pytest.mark.timeout(900)]

SCRIPTS = [
    "tests/e2b/test_e2b_sync.py",
    "tests/e2b/test_e2b_async.py",
    "tests/e2b/script_current_sdk.py",
]


@pytest.mark.parametrize("script", SCRIPTS)
def test_wide_script_passes_under_the_current_sdk(script: str) -> None:
    """One subprocess per script, so pytest-xdist spreads them over its workers."""
    run = run_pytest_under(CURRENT, [script], timeout=840)
    summary = run.stdout.strip().splitlines()[-1:] or [run.stderr]
    assert run.returncode == 0, f"e2b=={CURRENT}: {summary}\n{run.stdout[-20000:]}{run.stderr}"
    assert " passed" in summary[0] and "failed" not in summary[0], summary
