"""A network update closing an open connection's access, end to end: the current
E2B SDK against `space up` on a real microVM behind the red-team fake internet
(script_network_update_vm.py, in a pytest subprocess under e2b==2.63.0, which
starts and sweeps its own server). .venv's pinned e2b==2.21.1 has no
`update_network`, so the flow runs under 2.63 only; the second test pins that
fact, so the day 2.21.1's successor gains it the flow gets run under it too."""

from __future__ import annotations

import pytest
from e2b import AsyncSandbox, Sandbox

from tests.e2b.sdks import CURRENT, run_pytest_under
from tests.e2e.conftest import _host_reason

pytestmark = pytest.mark.e2b
SCRIPT = "tests/e2b/script_network_update_vm.py"


@pytest.mark.vm
@pytest.mark.netns
@pytest.mark.redteam
@pytest.mark.timeout(900)
def test_a_network_update_closes_an_open_connection_under_the_current_sdk() -> None:
    reason = _host_reason()
    if reason:
        pytest.skip(reason)
    run = run_pytest_under(CURRENT, [SCRIPT], timeout=860)
    summary = run.stdout.strip().splitlines()[-1:] or [run.stderr]
    assert run.returncode == 0, f"e2b=={CURRENT}: {summary}\n{run.stdout[-20000:]}{run.stderr}"
    assert " passed" in summary[0] and "skipped" not in summary[0], summary


def test_the_pinned_sdk_cannot_update_a_running_sandboxs_network() -> None:
    assert not hasattr(Sandbox, "update_network")
    assert not hasattr(AsyncSandbox, "update_network")
