"""`space.faults`: the `SPACE_FAULTS` grammar and where a point fires (no VMs)."""

from __future__ import annotations

import pytest

from space import faults


def test_steps_parse_with_an_optional_sandbox() -> None:
    plan = faults.parse(" pause.before_qmp_stop=kill, suspend.mid_snapshot@sb1=fail ,")
    assert plan == {"pause.before_qmp_stop": "kill", "suspend.mid_snapshot@sb1": "fail"}


@pytest.mark.parametrize("spec", ["pause.after_commit", "x=explode", "=kill"])
def test_a_malformed_entry_is_refused_by_name(spec: str) -> None:
    with pytest.raises(ValueError, match="SPACE_FAULTS"):
        faults.parse(spec)


def test_a_point_fails_only_in_its_operation_and_sandbox(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(faults.ENV, "suspend.after_clone@sb1=fail,timeout.before_commit=fail")
    faults._plan.cache_clear()
    try:
        faults.point("after_clone")  # no operation around it
        with faults.operation("restore", "sb1"):
            faults.point("after_clone")
        with faults.operation("suspend", "sb2"):
            faults.point("after_clone")
        with faults.operation("suspend", "sb1"), pytest.raises(faults.FaultInjected):
            faults.point("after_clone")
        with pytest.raises(faults.FaultInjected, match="timeout.before_commit"):
            faults.point("timeout.before_commit")
        with faults.operation("suspend", "sb1"):
            faults.point("after_clone")  # a failure fires once: the retry passes
        faults.point("timeout.before_commit")
    finally:
        monkeypatch.delenv(faults.ENV)
        faults._plan.cache_clear()
        faults._failed.clear()
