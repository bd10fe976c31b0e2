"""The code interpreter's sans-io core: Jupyter messages in, e2b-code-interpreter lines out."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest

from space.interpreter.outputs import (
    RESTORE_ENV_CODE,
    Run,
    env_code,
    result_line,
    sandbox_env_code,
)

pytestmark = pytest.mark.interpreter


def _msg(kind: str, parent: str = "m1", **content: Any) -> dict[str, Any]:
    date = datetime.datetime(2026, 12, 2, 6, 0, tzinfo=datetime.UTC)
    return {
        "msg_type": kind,
        "header": {"msg_type": kind, "date": date},
        "parent_header": {"msg_id": parent},
        "content": content,
    }


def test_a_cell_streams_its_output_and_ends_when_the_kernel_goes_idle() -> None:
    run = Run("m1")
    assert run.feed(_msg("status", execution_state="idle")) == []  # before it took the cell
    assert not run.done
    fed = [
        _msg("status", execution_state="busy"),
        _msg("execute_input", execution_count=3, code="print(1); 2"),
        _msg("stream", name="stdout", text="1\n"),
        _msg("stream", name="stderr", text="careful\n"),
        _msg("execute_result", data={"text/plain": "2"}, execution_count=3),
    ]
    lines = [line for msg in fed for line in run.feed(msg)]
    assert lines == [
        {"type": "number_of_executions", "execution_count": 3},
        {"type": "stdout", "text": "1\n", "timestamp": "2026-12-02T06:00:00+00:00"},
        {"type": "stderr", "text": "careful\n", "timestamp": "2026-12-02T06:00:00+00:00"},
        {"type": "result", "is_main_result": True, "text": "2"},
    ]
    assert not run.done
    run.feed(_msg("status", execution_state="idle"))
    assert run.done


def test_messages_of_other_cells_are_ignored() -> None:
    run = Run("m1")
    assert run.feed(_msg("stream", parent="other", name="stdout", text="x")) == []
    run.feed(_msg("status", parent="other", execution_state="busy"))
    run.feed(_msg("status", parent="other", execution_state="idle"))
    assert not run.done


def test_an_error_is_reported_once_with_its_traceback() -> None:
    run = Run("m1")
    run.feed(_msg("status", execution_state="busy"))
    traceback = ["Traceback", "----> 1 1/0", "ZeroDivisionError: division by zero"]
    error = {"ename": "ZeroDivisionError", "evalue": "division by zero", "traceback": traceback}
    lines = run.feed(_msg("error", **error))
    assert lines == [
        {
            "type": "error",
            "name": "ZeroDivisionError",
            "value": "division by zero",
            "traceback": "Traceback\n----> 1 1/0\nZeroDivisionError: division by zero",
        }
    ]
    assert run.feed(_msg("execute_reply", status="error", **error)) == []  # not twice


def test_an_aborted_cell_ends_with_an_error() -> None:
    run = Run("m1")
    assert run.feed(_msg("execute_reply", status="abort")) == [
        {
            "type": "error",
            "name": "ExecutionAborted",
            "value": "Execution was aborted",
            "traceback": "",
        }  # fmt: skip
    ]
    assert run.done


def test_display_bundles_map_to_result_fields() -> None:
    bundle = {
        "text/plain": "'quoted'",
        "image/png": "iVBORw0KGgo=",
        "e2b/data": {"a": [1, 2]},
        "application/vnd.custom+json": {"x": 1},
    }
    assert result_line(bundle, main=False) == {
        "type": "result",
        "is_main_result": False,
        "text": "quoted",  # a string's repr shows as the string
        "png": "iVBORw0KGgo=",
        "data": {"a": [1, 2]},
        "extra": {"application/vnd.custom+json": {"x": 1}},
    }


def test_env_code_sets_and_restores_any_value_safely() -> None:
    hostile = {"A": "it's \"quoted\"\n'''; import os; os._exit(1) #", "B": "\\x00"}
    namespace: dict[str, Any] = {}
    import os

    before = dict(os.environ)
    try:
        exec(env_code(hostile), namespace)  # noqa: S102 - the code the kernel runs
        assert {k: os.environ[k] for k in hostile} == hostile
        exec(RESTORE_ENV_CODE, namespace)  # noqa: S102
        assert dict(os.environ) == before
    finally:
        os.environ.clear()
        os.environ.update(before)
    assert json.loads(json.dumps(hostile)) == hostile


def test_sandbox_env_code_sets_the_new_env_and_unsets_what_left() -> None:
    import os

    before = dict(os.environ)
    try:
        os.environ["SPACE_TEST_GONE"] = "old"
        exec(sandbox_env_code({"SPACE_TEST_NEW": "it's"}, ["SPACE_TEST_GONE"]), {})  # noqa: S102
        assert os.environ["SPACE_TEST_NEW"] == "it's"
        assert "SPACE_TEST_GONE" not in os.environ
    finally:
        os.environ.clear()
        os.environ.update(before)
