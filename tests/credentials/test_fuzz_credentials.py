"""Schemathesis fuzzes the credential routes (`/v1/credentials...` and
`/v1/sandboxes/{id}/credentials`) of a real uvicorn server over the fake node: no
request, however absurd, is answered with a server error, and no answer or log line
holds a value the fuzzer stored. (tests/hardening/test_fuzz.py covers every `/v1`
route against `space up` with real VMs.)"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ADMIN_KEY, ServerThread

# `hardening`, not `credentials`: about two minutes per database on a loaded 2-core host,
# and `-m credentials` stays the fast set.
pytestmark = [pytest.mark.hardening, pytest.mark.timeout(600)]

EXAMPLES = 4


def test_the_credential_routes_answer_no_fuzzed_request_with_a_server_error(
    server: ServerThread, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    st = str(Path(sys.executable).with_name("st"))
    argv = [
        st,
        "run",
        f"{server.url}/openapi.json",
        "--include-path-regex",
        "credentials",
        "--checks",
        "not_a_server_error",
        "--phases",
        "coverage,fuzzing",  # no links to follow: stateful adds nothing
        "--max-examples",
        str(EXAMPLES),
        "--workers",
        "1",
        "--request-timeout",
        "30",
        "--seed",
        "11",
        # the health checks judge the generator (its rejected examples, its speed on a
        # loaded host), not the server: one failed a CI-loaded run with no request wrong
        "--suppress-health-check",
        "all",
        "--no-shrink",
        "-H",
        f"Authorization: Bearer {ADMIN_KEY}",
    ]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=540, check=False, cwd=tmp_path
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    assert "unhandled error" not in caplog.text, caplog.text[-4000:]
