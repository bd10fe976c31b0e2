"""E2B's own public test suites, unmodified, against a SPACE server.

    sudo SPACE_ACCEL=tcg SPACE_CACHE_DIR=/var/cache/space .venv/bin/python \\
        -m bench.e2b_conformance [--suite NAME ...] [--select PATH ...] [-k EXPR] \\
        [--url URL --key KEY] [--source DIR] [--json FILE]

The suites, each tree fetched (`git fetch --depth 1`) from https://github.com/e2b-dev
(`--source DIR`: from the git repositories DIR/E2B and DIR/code-interpreter) and
extracted into a temporary directory, removed afterwards:

    e2b-2.63-sync, -async  E2B's packages/python-sdk/tests/sync, /async at the default
                           branch's head, under e2b 2.63.0 (.venv/sdk/e2b-2.63.0)
    e2b-2.21-sync, -async  the same at tag @e2b/python-sdk@2.21.1, under e2b 2.21.1
                           (.venv's own)
    code-interpreter-2.11  code-interpreter's python/tests at the default branch's
                           head, under e2b-code-interpreter 2.11.5 (.venv/sdk/e2b-2.63.0)

Without `--url`, a throw-away `space up` is started (bench/servers.py) and swept
afterwards; SPACE_ACCEL and SPACE_CACHE_DIR are passed on to it. Before the suites,
one sandbox of each template they use is created and deleted, so a first create's
base snapshot build is not charged to a test. Each suite runs in a pytest subprocess
in its tree, under the tree's own pytest.ini, with only E2B_API_URL, E2B_SANDBOX_URL
and E2B_API_KEY of E2B's variables set (to the server and its key), `--timeout` per
test and a bound on the suite's whole run, and its junit XML is read
(bench/e2b_failures.py).
`--select` takes test paths as printed (`packages/python-sdk/tests/sync/...py`); a
suite whose tree holds none of them is left out. `-k` goes to pytest as it is.

Printed per suite: `N passed, M failed (K of them not SPACE's), S skipped`, then each
failure, SPACE's with the first line of its message, the others with their kind and
reason. `--json FILE` (`-` for stdout) writes the same per suite. A suite that cannot
run is reported and the next one runs; the exit status is 0.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
from tests.e2b.sdks import CURRENT, sdk_dir

from bench.e2b_failures import SPACE, classify, read_junit
from bench.servers import CREATE_TIMEOUT, with_space_up
from bench.stats import emit

GITHUB = "https://github.com/e2b-dev"
TEST_TIMEOUT = 120.0  # E2B's pytest.ini says 30 s; TCG guests are slower than E2B's
SUITE_TIMEOUT = 3 * 3600.0
LOG_TAIL = 20


@dataclass(frozen=True)
class Suite:
    name: str
    repo: str  # under e2b-dev
    ref: str
    root: str  # where the tree's pytest.ini is
    tests: str  # under root
    sdk: str | None  # the e2b version of a .venv/sdk directory; None: .venv's own e2b
    package: str  # the SDK the suite tests
    template: str  # what the suite creates sandboxes of (warmed first)


_E2B = "packages/python-sdk"
_TAG_2_21 = "refs/tags/@e2b/python-sdk@2.21.1"
SUITES = (
    Suite("e2b-2.63-sync", "E2B", "HEAD", _E2B, "tests/sync", CURRENT, "e2b", "base"),
    Suite("e2b-2.63-async", "E2B", "HEAD", _E2B, "tests/async", CURRENT, "e2b", "base"),
    Suite("e2b-2.21-sync", "E2B", _TAG_2_21, _E2B, "tests/sync", None, "e2b", "base"),
    Suite("e2b-2.21-async", "E2B", _TAG_2_21, _E2B, "tests/async", None, "e2b", "base"),
    Suite(
        "code-interpreter-2.11",
        "code-interpreter",
        "HEAD",
        "python",
        "tests",
        CURRENT,
        "e2b-code-interpreter",
        "code-interpreter",
    ),
)


@dataclass
class Result:
    suite: str
    tree: str = ""  # repo@commit
    sdk: str = ""
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    not_space: int = 0
    seconds: float = 0.0
    error: str | None = None
    failures: list[dict[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class Options:
    """What every suite of one invocation shares but the server."""

    source: str  # where the repositories are: GITHUB or file://DIR
    select: tuple[str, ...]
    keyword: str | None
    test_timeout: float
    suite_timeout: float


def run_suites(options: Options, suites: list[Suite], url: str, key: str) -> list[Result]:
    """Each suite in turn against the server at `url`, reported as it ends."""
    with tempfile.TemporaryDirectory(prefix="space-e2b-conformance-") as work:
        runner = Runner(options, url, key, Path(work))
        return [runner.run(suite) for suite in suites]


class Runner:
    """Runs suites against one server, fetching trees into `work`."""

    def __init__(self, options: Options, url: str, key: str, work: Path) -> None:
        self.options = options
        self.url = url
        self.key = key
        self.work = work
        self.warmed: set[str] = set()

    def run(self, suite: Suite) -> Result:
        """One suite, printed; a suite that cannot run is a result with an error."""
        result = Result(suite.name)
        started = time.monotonic()
        try:
            result.sdk = sdk_versions(suite)
            self._run(suite, result)
        except subprocess.TimeoutExpired:
            result.error = f"pytest ran over {self.options.suite_timeout:g} s"
        except Exception as exc:  # reported; the next suite still runs
            result.error = f"{type(exc).__name__}: {exc}"
        result.seconds = round(time.monotonic() - started, 1)
        _report(result)
        return result

    def _run(self, suite: Suite, result: Result) -> None:
        tree, commit = fetch_tree(self.options.source, suite, self.work)
        result.tree = f"e2b-dev/{suite.repo}@{commit[:12]}"
        targets = selected(suite, tree, self.options.select)
        if not targets:
            result.error = "nothing of --select is in this suite"
            return
        self._warm(suite.template)
        report = self.work / f"{suite.name}.xml"
        log = self.work / f"{suite.name}.log"
        code = self._pytest(suite, tree, targets, report, log)
        if code not in (0, 1):  # 2-4: interrupted, internal or usage error; 5: no test
            tail = log.read_text(errors="replace").splitlines()[-LOG_TAIL:]
            result.error = f"pytest exited {code}:\n" + "\n".join(tail)
            return
        outcomes = read_junit(report, suite.root)
        result.passed = sum(outcome.state == "passed" for outcome in outcomes)
        result.skipped = sum(outcome.state == "skipped" for outcome in outcomes)
        for outcome in (outcome for outcome in outcomes if outcome.state == "failed"):
            kind, reason = classify(outcome.test_id)
            result.failures.append(
                {"id": outcome.test_id, "kind": kind, "reason": reason, "message": outcome.message}
            )
        result.failed = len(result.failures)
        result.not_space = sum(failure["kind"] != SPACE for failure in result.failures)

    def _warm(self, template: str) -> None:
        """Create and delete one sandbox of `template` (a first one builds its snapshot)."""
        if template in self.warmed:
            return
        started = time.monotonic()
        headers = {"Authorization": f"Bearer {self.key}"}
        with httpx.Client(base_url=self.url, headers=headers, timeout=CREATE_TIMEOUT) as http:
            created = http.post("/v1/sandboxes", json={"template": template})
            created.raise_for_status()
            http.delete(f"/v1/sandboxes/{created.json()['id']}").raise_for_status()
        self.warmed.add(template)
        emit(f"-- a first {template} sandbox in {time.monotonic() - started:.0f} s")

    def _pytest(self, suite: Suite, tree: Path, targets: list[str], report: Path, log: Path) -> int:
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0"]
        argv += [f"--timeout={self.options.test_timeout:g}", f"--junitxml={report}"]
        argv += ["-o", "junit_family=xunit1"]
        argv += ["-k", self.options.keyword] if self.options.keyword else []
        with log.open("wb") as out:
            done = subprocess.run(
                argv + targets,
                cwd=tree,
                env=suite_env(suite, self.url, self.key),
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=self.options.suite_timeout,
                check=False,
            )
        return done.returncode


def fetch_tree(source: str, suite: Suite, work: Path) -> tuple[Path, str]:
    """The suite's tree at its ref (only its tests and pytest.ini), and the commit."""
    git_dir = work / f"{suite.repo}.git"
    if not git_dir.exists():
        _git("init", "--quiet", "--bare", str(git_dir))
    url = f"{source}/{suite.repo}"
    _git("--git-dir", str(git_dir), "fetch", "--quiet", "--depth", "1", url, suite.ref)
    commit = _git("--git-dir", str(git_dir), "rev-parse", "FETCH_HEAD^{commit}").strip()
    tree = work / f"{suite.repo}-{commit[:12]}"
    if not tree.exists():
        archive = work / f"{suite.repo}.tar"
        paths = [f"{suite.root}/tests", f"{suite.root}/pytest.ini"]
        _git("--git-dir", str(git_dir), "archive", f"--output={archive}", commit, *paths)
        with tarfile.open(archive) as tar:
            tar.extractall(tree, filter="data")
        archive.unlink()
    return tree / suite.root, commit


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise OSError(f"git {' '.join(args[2:4])}: {done.stderr.strip()}")
    return done.stdout


def selected(suite: Suite, tree: Path, select: tuple[str, ...]) -> list[str]:
    """pytest's targets, relative to `tree`: the suite's test dir, or what of `select`
    (repository paths, `::name` allowed) lies in it and exists in this tree."""
    if not select:
        return [suite.tests]
    half = f"{suite.root}/{suite.tests}"
    inside = [path for path in select if path == half or path.startswith(half + "/")]
    targets = [path.removeprefix(suite.root + "/") for path in inside]
    return [target for target in targets if (tree / target.split("::")[0]).exists()]


def sdk_versions(suite: Suite) -> str:
    """The versions of the suite's package and of e2b that its pytest imports."""
    path = [str(sdk_dir(suite.sdk))] if suite.sdk is not None else []
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions(path=path + sys.path):
        found.setdefault(dist.metadata["Name"].lower(), dist.version)
    names = dict.fromkeys([suite.package, "e2b"])
    return ", ".join(f"{name} {found.get(name, '(missing)')}" for name in names)


def suite_env(suite: Suite, url: str, key: str) -> dict[str, str]:
    """This environment without E2B's variables and PYTHONPATH (so nothing of the
    caller's path shadows the tree's modules), then the server, its key and the SDK."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("E2B_") and k != "PYTHONPATH"}
    env.update(E2B_API_URL=url, E2B_SANDBOX_URL=url, E2B_API_KEY=key)
    if suite.sdk is not None:
        env["PYTHONPATH"] = str(sdk_dir(suite.sdk))
    return env


def _report(result: Result) -> None:
    """The summary line, then SPACE's failures (with their message), then the others."""
    emit(f"== {result.suite}: {result.tree or '(no tree)'}, {result.sdk}")
    if result.error is not None:
        emit(f"   not run: {result.error}")
        return
    emit(
        f"   {result.passed} passed, {result.failed} failed "
        f"({result.not_space} of them not SPACE's), {result.skipped} skipped "
        f"in {result.seconds:.0f} s"
    )
    for failure in sorted(result.failures, key=lambda failure: failure["kind"] != SPACE):
        said = failure["message"] if failure["kind"] == SPACE else failure["reason"]
        emit(f"   {failure['kind']:<14} {failure['id']}: {said}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.e2b_conformance", description=__doc__)
    names = [suite.name for suite in SUITES]
    parser.add_argument("--suite", nargs="*", choices=names, default=names)
    parser.add_argument("--select", nargs="*", default=[], help="test paths as printed")
    parser.add_argument("-k", dest="keyword", help="a pytest -k expression")
    parser.add_argument("--url", help="a running SPACE server (with --key) instead of space up")
    parser.add_argument("--key", help="an API key of that server")
    parser.add_argument("--source", type=Path, help="DIR with the git repos E2B, code-interpreter")
    parser.add_argument("--test-timeout", type=float, default=TEST_TIMEOUT)
    parser.add_argument("--suite-timeout", type=float, default=SUITE_TIMEOUT)
    parser.add_argument("--json", help="write the results as JSON to this file (- for stdout)")
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = _parser()
    args = parser.parse_args(argv)
    if (args.url is None) != (args.key is None):
        parser.error("--url and --key go together")
    options = Options(
        source=f"file://{args.source.resolve()}" if args.source else GITHUB,
        select=tuple(args.select),
        keyword=args.keyword,
        test_timeout=args.test_timeout,
        suite_timeout=args.suite_timeout,
    )
    suites = [suite for suite in SUITES if suite.name in args.suite]
    results: list[Result] = []
    if args.url is not None:
        results = run_suites(options, suites, args.url, args.key)
    else:
        with_space_up(
            "space-bench-e2b-",
            "E2B's suites against a throw-away space up",
            lambda server: results.extend(run_suites(options, suites, server.url, server.key)),
        )
    _write_json(args.json, results)


def _write_json(target: str | None, results: list[Result]) -> None:
    document = {"suites": [asdict(result) for result in results]}
    if target == "-":
        json.dump(document, sys.stdout, indent=2)
    elif target:
        Path(target).write_text(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    main()
