"""E2B secrets and `network.rules` under the current SDK (e2b==2.63.0, tests/e2b/sdks.py):
script_secrets.py in a pytest subprocess over the fake node."""

from __future__ import annotations

import pytest

from tests.e2b.sdks import CURRENT, run_pytest_under

pytestmark = [pytest.mark.e2b, pytest.mark.credentials, pytest.mark.timeout(600)]


def test_secrets_script_passes_under_the_current_sdk() -> None:
    run = run_pytest_under(CURRENT, ["tests/e2b/script_secrets.py"], timeout=540)
    summary = run.stdout.strip().splitlines()[-1:] or [run.stderr]
    assert run.returncode == 0, f"e2b=={CURRENT}: {summary}\n{run.stdout[-20000:]}{run.stderr}"
    assert " passed" in summary[0] and "failed" not in summary[0], summary
