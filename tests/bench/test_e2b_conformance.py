"""bench.e2b_conformance without a server: the junit report read into test ids, failed
tests classified by the table, `--select` mapped onto a suite's tree, the suite's
environment, and a tree fetched from a local git repository."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bench import e2b_failures
from bench.e2b_conformance import SUITES, Suite, fetch_tree, selected, suite_env
from bench.e2b_failures import KNOWN, SPACE, Outcome, classify, read_junit

REPORT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites name="pytest tests"><testsuite name="pytest" tests="5">
<testcase classname="tests.sync.sandbox_sync.files.test_exists" name="test_exists"
  file="tests/sync/sandbox_sync/files/test_exists.py" line="3" time="1.2" />
<testcase classname="tests.sync.sandbox_sync.test_network" name="test_deny_specific_ip"
  file="tests/sync/sandbox_sync/test_network.py" line="54" time="4.0">
  <failure message="AssertionError: assert '' == '301'&#10;  - 301">trace</failure></testcase>
<testcase classname="tests.sync.template_sync.test_tags.TestTagsIntegration"
  name="test_assign_single_tag_to_existing_template"
  file="tests/sync/template_sync/test_tags.py" line="187" time="1.9">
  <error message="failed on setup with &quot;httpx.ConnectError&quot;">trace</error></testcase>
<testcase classname="tests.sync.secret_sync.test_secret" name="test_fill_invalid_name_raises[{name]"
  file="tests/sync/secret_sync/test_secret.py" line="200" time="0.0" />
<testcase classname="tests.sync.test_x" name="test_skipped" file="tests/sync/test_x.py"
  line="1" time="0.0"><skipped message="skipped because E2B_DEBUG is set">why</skipped>
</testcase>
</testsuite></testsuites>
"""
ROOT = "packages/python-sdk"


def test_read_junit_gives_repository_ids_states_and_first_lines(tmp_path: Path) -> None:
    report = tmp_path / "report.xml"
    report.write_text(REPORT)
    assert read_junit(report, ROOT) == [
        Outcome(f"{ROOT}/tests/sync/sandbox_sync/files/test_exists.py::test_exists", "passed", ""),
        Outcome(
            f"{ROOT}/tests/sync/sandbox_sync/test_network.py::test_deny_specific_ip",
            "failed",
            "AssertionError: assert '' == '301'",
        ),
        Outcome(
            f"{ROOT}/tests/sync/template_sync/test_tags.py::TestTagsIntegration"
            "::test_assign_single_tag_to_existing_template",
            "failed",
            'failed on setup with "httpx.ConnectError"',
        ),
        Outcome(
            f"{ROOT}/tests/sync/secret_sync/test_secret.py::test_fill_invalid_name_raises[{{name]",
            "passed",
            "",
        ),
        Outcome(
            f"{ROOT}/tests/sync/test_x.py::test_skipped",
            "skipped",
            "skipped because E2B_DEBUG is set",
        ),
    ]


def test_read_junit_refuses_a_report_over_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = tmp_path / "report.xml"
    report.write_text(REPORT)
    monkeypatch.setattr(e2b_failures, "MAX_REPORT_BYTES", 100)
    with pytest.raises(ValueError, match="more than 100"):
        read_junit(report, ROOT)


@pytest.mark.parametrize(
    ("test_id", "kind"),
    [
        (f"{ROOT}/tests/sync/sandbox_sync/test_network.py::test_deny_specific_ip", "internet"),
        (f"{ROOT}/tests/async/sandbox_async/test_network.py::test_deny_specific_ip", "internet"),
        (f"{ROOT}/tests/async/sandbox_async/test_host.py::test_ping_server", "tls-front"),
        (
            f"{ROOT}/tests/sync/sandbox_sync/test_network.py::test_firewall_transform_injects_headers",
            "cloud-template",
        ),
        (f"{ROOT}/tests/sync/template_sync/test_stacktrace.py::test_traces_on_copy", "sdk-mock"),
        (f"{ROOT}/tests/sync/sandbox_sync/test_network.py::test_deny_all_traffic", SPACE),
        (f"{ROOT}/tests/sync/sandbox_sync/test_network.py::test_deny_specific_ip_v2", SPACE),
        ("python/tests/sync/test_host.py::test_ping_server", SPACE),
    ],
)
def test_classify_by_the_table_else_space(test_id: str, kind: str) -> None:
    assert classify(test_id)[0] == kind
    assert classify(test_id + "[param]")[0] == kind


def test_every_entry_has_a_known_kind_and_a_one_line_reason() -> None:
    kinds = {"internet", "cloud-template", "sdk-mock", "tls-front"}
    assert {known.kind for known in KNOWN} <= kinds
    assert all(known.reason and "\n" not in known.reason for known in KNOWN)
    assert len({known.pattern for known in KNOWN}) == len(KNOWN)
    assert classify(f"{ROOT}/tests/sync/x.py::test_y") == (SPACE, "")


def _suite(name: str) -> Suite:
    return next(suite for suite in SUITES if suite.name == name)


def test_selected_keeps_what_lies_in_the_suite_and_exists(tmp_path: Path) -> None:
    (tmp_path / "tests/sync/sandbox_sync/files").mkdir(parents=True)
    (tmp_path / "tests/sync/sandbox_sync/files/test_exists.py").touch()
    sync, other = _suite("e2b-2.63-sync"), _suite("e2b-2.63-async")
    wanted = (
        f"{ROOT}/tests/sync/sandbox_sync/files/test_exists.py::test_exists",
        f"{ROOT}/tests/sync/sandbox_sync/files/test_gone.py",
        f"{ROOT}/tests/async/sandbox_async/files/test_exists.py",
        "python/tests/sync/test_basic.py",
    )
    assert selected(sync, tmp_path, wanted) == [
        "tests/sync/sandbox_sync/files/test_exists.py::test_exists"
    ]
    assert selected(other, tmp_path, wanted[1:2]) == []
    assert selected(sync, tmp_path, ()) == ["tests/sync"]


def test_suite_env_sets_the_server_and_drops_e2b_and_pythonpath(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("E2B_DOMAIN", "e2b.app")
    monkeypatch.setenv("E2B_DEBUG", "1")
    monkeypatch.setenv("PYTHONPATH", "/somewhere")
    env = suite_env(_suite("e2b-2.21-sync"), "http://127.0.0.1:8080", "sk_key")
    e2b = {k: v for k, v in env.items() if k.startswith("E2B_")}
    assert e2b == {
        "E2B_API_URL": "http://127.0.0.1:8080",
        "E2B_SANDBOX_URL": "http://127.0.0.1:8080",
        "E2B_API_KEY": "sk_key",
    }
    assert "PYTHONPATH" not in env


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True)


def test_fetch_tree_extracts_the_tests_and_pytest_ini_at_the_ref(tmp_path: Path) -> None:
    repo = tmp_path / "source" / "E2B"
    tests = repo / ROOT / "tests" / "sync"
    tests.mkdir(parents=True)
    (tests / "test_a.py").write_text("def test_a(): pass\n")
    (repo / ROOT / "pytest.ini").write_text("[pytest]\n")
    (repo / ROOT / "e2b.py").write_text("# the SDK's source: never extracted\n")
    _git("init", "--quiet", cwd=repo)
    _git("add", ".", cwd=repo)
    _git("commit", "--quiet", "-m", "one", cwd=repo)
    _git("tag", "-a", "-m", "tag", "@e2b/python-sdk@2.21.1", cwd=repo)
    work = tmp_path / "work"
    work.mkdir()
    source = f"file://{tmp_path / 'source'}"
    tree, commit = fetch_tree(source, _suite("e2b-2.21-sync"), work)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True)
    assert commit == head.stdout.strip()
    assert tree == work / f"E2B-{commit[:12]}" / ROOT
    found = sorted(str(path.relative_to(tree)) for path in tree.rglob("*") if path.is_file())
    assert found == ["pytest.ini", "tests/sync/test_a.py"]
