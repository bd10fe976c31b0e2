"""Which failures of E2B's own test suites are not SPACE's, and the junit XML they come in.

`read_junit(path, root)` turns the `--junitxml` report of one pytest run (junit_family
`xunit1`, which names each test's file) into one `Outcome` per test case. A test's id is
its path in the upstream repository, `root` being where that run's pytest.ini is:
`packages/python-sdk/tests/sync/...py::test_name` (e2b-dev/E2B),
`python/tests/...py::Class::test_name` (e2b-dev/code-interpreter).

`classify(test_id)` gives a failed test's kind and reason: the first entry of `KNOWN`
whose pattern (fnmatch, `*` spans `/`) matches the id without its parameters (`[...]`),
else `space`, SPACE's own. Each entry was read off the test's source.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import NamedTuple
from xml.etree import ElementTree

MAX_REPORT_BYTES = 64 << 20  # a few thousand test cases with tracebacks stay far below
MAX_MESSAGE = 300
SPACE = "space"
E2B_TESTS = "packages/python-sdk/tests/*"


class Known(NamedTuple):
    pattern: str
    kind: str
    reason: str


def _e2b(test: str, kind: str, reason: str) -> Known:
    """An entry for a test of E2B's SDK suite, in both halves (sync and async)."""
    return Known(f"{E2B_TESTS}/{test}", kind, reason)


_GSTATIC = "curls connectivitycheck.gstatic.com from the guest and expects 204"
_ONE_ONE = "curls https://1.1.1.1 from the guest and expects it to answer 301"
_HTTPS_URL = "requests https://<port>-<id>.<domain> from the host: wildcard DNS and TLS in front"

KNOWN: tuple[Known, ...] = (
    _e2b("sandbox_*/test_internet_access.py::test_internet_access_enabled", "internet", _GSTATIC),
    _e2b("sandbox_*/test_internet_access.py::test_internet_access_default", "internet", _GSTATIC),
    _e2b("sandbox_*/test_network.py::test_allow_specific_ip_with_deny_all", "internet", _ONE_ONE),
    _e2b("sandbox_*/test_network.py::test_deny_specific_ip", "internet", _ONE_ONE),
    _e2b(
        "sandbox_*/test_network.py::test_allow_takes_precedence_over_deny",
        "internet",
        "curls https://1.1.1.1 and https://8.8.8.8 from the guest and expects 301 and 302",
    ),
    _e2b(
        "sandbox_*/test_network.py::test_update_network_applies_restrictions",
        "internet",
        "curls https://8.8.8.8 from the guest before the update and expects it to answer",
    ),
    _e2b(
        "sandbox_*/test_network.py::test_update_network_clears_existing_rules",
        "internet",
        "curls https://1.1.1.1 and https://8.8.8.8 from the guest after the update",
    ),
    _e2b(
        "sandbox_*/test_network.py::test_firewall_transform_injects_headers",
        "cloud-template",
        "creates a sandbox of E2B's `httpbin` template as the upstream that echoes headers",
    ),
    _e2b("sandbox_*/test_network.py::test_allow_public_traffic_false", "tls-front", _HTTPS_URL),
    _e2b("sandbox_*/test_network.py::test_allow_public_traffic_true", "tls-front", _HTTPS_URL),
    _e2b("sandbox_*/test_host.py::test_ping_server", "tls-front", _HTTPS_URL),
    _e2b(
        "template_*/test_stacktrace.py::test_traces_on_*",
        "sdk-mock",
        "its mock of request_build takes no min_free_disk_mb, which e2b 2.63's build passes",
    ),
)


@dataclass(frozen=True)
class Outcome:
    test_id: str
    state: str  # "passed", "failed" (a failure or an error) or "skipped"
    message: str  # the first line of the failure or skip reason; "" if passed


def read_junit(path: Path, root: str) -> list[Outcome]:
    """Every test case of one report; a report over MAX_REPORT_BYTES is refused."""
    size = path.stat().st_size
    if size > MAX_REPORT_BYTES:
        raise ValueError(f"{path} has {size} bytes, more than {MAX_REPORT_BYTES}")
    cases = ElementTree.parse(path).getroot().iter("testcase")
    return [_outcome(case, root) for case in cases]


def _outcome(case: ElementTree.Element, root: str) -> Outcome:
    test_id = _test_id(case, root)
    for tag, state in (("failure", "failed"), ("error", "failed"), ("skipped", "skipped")):
        found = case.find(tag)
        if found is not None:
            return Outcome(test_id, state, _first_line(found.get("message", "")))
    return Outcome(test_id, "passed", "")


def _test_id(case: ElementTree.Element, root: str) -> str:
    """`root/file::Class::name`: the class is what `classname` holds past the module."""
    file = case.get("file", "")
    module = file.removesuffix(".py").replace("/", ".")
    inner = case.get("classname", "").removeprefix(module).lstrip(".")
    return "::".join(part for part in (f"{root}/{file}", inner, case.get("name", "")) if part)


def _first_line(message: str) -> str:
    lines = message.strip().splitlines()
    return lines[0][:MAX_MESSAGE] if lines else ""


def classify(test_id: str) -> tuple[str, str]:
    """(kind, reason) of a failed test; (`space`, "") when no entry matches."""
    bare = test_id.split("[", 1)[0]
    for known in KNOWN:
        if fnmatchcase(bare, known.pattern):
            return known.kind, known.reason
    return SPACE, ""
