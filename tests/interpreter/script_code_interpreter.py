"""`e2b-code-interpreter` 2.11.5, unmodified, against SPACE's `code-interpreter` template.

Run under the current SDK (it needs e2b>=2.55) in a subprocess by
test_code_interpreter_vm.py, pointed at `space up` by E2B_API_URL, E2B_SANDBOX_URL and
E2B_API_KEY only. Not collected on its own (no `test_` prefix in the file name).
"""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Iterator

import pytest
from e2b_code_interpreter import Sandbox

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    # The SDK's default template (code-interpreter-v1), with a sandbox-level env var.
    with Sandbox.create(envs={"SANDBOX_LEVEL": "set at create"}) as sbx:
        yield sbx


def test_state_is_kept_between_calls(sandbox: Sandbox) -> None:
    sandbox.run_code("x = 41")
    execution = sandbox.run_code("x + 1")
    assert execution.error is None
    assert execution.text == "42"
    assert execution.execution_count is not None and execution.execution_count >= 2


def test_stdout_streams_as_it_is_printed(sandbox: Sandbox) -> None:
    seen: list[tuple[float, str]] = []
    code = "import time\nfor i in range(3):\n    print('tick', i, flush=True)\n    time.sleep(1)\n"
    execution = sandbox.run_code(
        code, on_stdout=lambda msg: seen.append((time.monotonic(), msg.line))
    )
    assert [line for _, line in seen] == ["tick 0\n", "tick 1\n", "tick 2\n"]
    assert seen[-1][0] - seen[0][0] > 1.5  # each line arrived while the cell still ran
    assert execution.logs.stdout == ["tick 0\n", "tick 1\n", "tick 2\n"]


def test_stderr_and_env_vars(sandbox: Sandbox) -> None:
    code = "import os, sys\nprint(os.environ['GREETING'], file=sys.stderr)"
    execution = sandbox.run_code(code, envs={"GREETING": "hello 'quoted' \"env\""})
    assert execution.logs.stderr == ["hello 'quoted' \"env\"\n"]
    after = sandbox.run_code("import os\n'GREETING' in os.environ")
    assert after.text == "False"  # per-run env vars do not outlive the run


def test_the_sandbox_env_reaches_the_kernel(sandbox: Sandbox) -> None:
    execution = sandbox.run_code("import os\nos.environ['SANDBOX_LEVEL']")
    assert execution.text == "set at create"
    fresh = sandbox.create_code_context()
    assert sandbox.run_code("os.environ['SANDBOX_LEVEL']", context=fresh).error is not None
    assert sandbox.run_code("import os\nos.environ['SANDBOX_LEVEL']", context=fresh).text == (
        "set at create"
    )
    sandbox.remove_code_context(fresh)


def test_matplotlib_returns_a_png(sandbox: Sandbox) -> None:
    code = (
        "import matplotlib.pyplot as plt\n"
        "plt.plot([1, 2, 3], [3, 1, 2])\n"
        "plt.title('space')\n"
        "plt.show()\n"
    )
    execution = sandbox.run_code(code)
    assert execution.error is None, execution.error
    pngs = [r.png for r in execution.results if r.png]
    assert len(pngs) == 1
    assert base64.b64decode(pngs[0]).startswith(PNG_MAGIC)


def test_dataframe_result(sandbox: Sandbox) -> None:
    code = "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})"
    execution = sandbox.run_code(code)
    [result] = execution.results
    assert result.is_main_result
    assert result.data == {"a": [1, 2], "b": ["x", "y"]}
    assert result.html is not None and "<table" in result.html


def test_error_has_name_value_and_traceback(sandbox: Sandbox) -> None:
    execution = sandbox.run_code("def f():\n    return 1 / 0\nf()")
    assert execution.error is not None
    assert execution.error.name == "ZeroDivisionError"
    assert execution.error.value == "division by zero"
    plain = re.sub(r"\x1b\[[0-9;]*m", "", execution.error.traceback)  # IPython colours it
    assert "----> 3 f()" in plain and "return 1 / 0" in plain
    assert sandbox.run_code("1 + 1").text == "2"  # the context survives the error


def test_a_kernel_that_dies_is_restarted(sandbox: Sandbox) -> None:
    context = sandbox.create_code_context()
    sandbox.run_code("z = 1", context=context)
    died = sandbox.run_code("import os\nos._exit(3)", context=context, timeout=120)
    assert died.error is not None and died.error.name == "KernelDied", died
    after = sandbox.run_code("'z' in dir()", context=context, timeout=120)
    assert after.text == "False"  # a new kernel: the context works, its state is gone
    sandbox.remove_code_context(context)


def test_contexts_do_not_share_state(sandbox: Sandbox) -> None:
    first = sandbox.create_code_context(cwd="/tmp")
    second = sandbox.create_code_context()
    assert first.cwd == "/tmp" and first.language == "python"
    sandbox.run_code("secret = 'only in the first'", context=first)
    assert sandbox.run_code("secret", context=first).text == "only in the first"
    other = sandbox.run_code("secret", context=second)
    assert other.error is not None and other.error.name == "NameError"
    assert sandbox.run_code("import os\nos.getcwd()", context=first).text == "/tmp"
    listed = {c.id for c in sandbox.list_code_contexts()}
    assert {first.id, second.id} <= listed
    sandbox.remove_code_context(second)
    assert second.id not in {c.id for c in sandbox.list_code_contexts()}
    sandbox.restart_code_context(first)
    gone = sandbox.run_code("secret", context=first)
    assert gone.error is not None and gone.error.name == "NameError"


def test_timeout_interrupts_the_kernel(sandbox: Sandbox) -> None:
    context = sandbox.create_code_context()
    started = time.monotonic()
    with pytest.raises(Exception, match="timed out"):
        sandbox.run_code("import time\ntime.sleep(120)", context=context, timeout=3)
    assert time.monotonic() - started < 60
    # The interrupted kernel takes the next cell at once, state intact.
    sandbox.run_code("y = 7", context=context)
    assert sandbox.run_code("y * 6", context=context, timeout=60).text == "42"
