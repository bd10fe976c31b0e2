"""A network update on a running sandbox closes an open connection's access: the
current E2B SDK (2.63, `update_network`) against `space up` on a real microVM whose
gateway's upstream is the red-team fake internet (tests/e2e/internet.py).

In the guest, tests/e2b/guest_netclient.py holds a streaming download open from
each of two allowed hosts and makes requests on a kept-alive connection to one of
them; the update removes that host. Then its open stream is cut and its kept-alive
connection's next request fails, a new connection to it is refused (by name, by
address with its SNI, over plain HTTP), while the stream from the host still
allowed keeps flowing and a new connection to it works; another org's sandbox
allowed the removed host still reaches it. The fake internet shows the removed
host received nothing it should not have, and no canary was reached. A second
update (`allow_internet_access: False`) then cuts the remaining stream.

Not collected by default (.venv's e2b 2.21.1 has no `update_network`):
test_e2b_network_update_vm.py runs it under 2.63 in a subprocess.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from e2b import Sandbox
from e2b.exceptions import NotFoundException

from tests.e2b.conftest import point_sdk_at
from tests.e2e.conftest import _host_reason
from tests.e2e.internet import BehindFakeInternet, FakeInternetThread, space_behind_fake_internet
from tests.redteam.fakenet import WEB_IP, FakeInternet

pytestmark = [
    pytest.mark.e2b,
    pytest.mark.vm,
    pytest.mark.netns,
    pytest.mark.redteam,
    pytest.mark.timeout(840),
]

CUT = "allowed.test"  # the update removes it
STAY = "other.test"  # still allowed after the first update
CLIENT = Path(__file__).with_name("guest_netclient.py")
LOG = "/tmp/netclient.log"
WAIT = 240.0  # seconds for one condition in a TCG guest on shared cores
POLL = 0.2
DRIP = 6000  # bytes per download, one per 0.1 s (fakenet.DRIP_MAX): far longer than the test


@pytest.fixture(scope="module")
def behind() -> Iterator[BehindFakeInternet]:
    reason = _host_reason()
    if reason:
        pytest.skip(reason)
    with space_behind_fake_internet(SPACE_TIMEOUT_CREATE="900") as behind:
        yield behind


def test_a_network_update_closes_an_open_connections_access(
    behind: BehindFakeInternet, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = behind.server
    point_sdk_at(monkeypatch, server.url, server.org_key("netvm"))
    sandbox = Sandbox.create(network={"allow_out": [CUT, STAY]})
    try:
        neighbour = Sandbox.create(
            network={"allow_out": [CUT]}, api_key=server.org_key("netvm-other-tenant")
        )
        try:
            _update_while_connected(sandbox, neighbour, behind.internet)
        finally:
            neighbour.kill()
    finally:
        sandbox.kill()


def _update_while_connected(
    sandbox: Sandbox, neighbour: Sandbox, internet: FakeInternetThread
) -> None:
    sandbox.files.write("/tmp/netclient.py", CLIENT.read_text())
    sandbox.commands.run(
        f"python3 /tmp/netclient.py {LOG} {CUT} {STAY} {WEB_IP} {DRIP}", background=True
    )
    _wait(
        sandbox,
        "both streams and the kept-alive connection working",
        lambda log: _bytes(log, CUT) >= 10 and _bytes(log, STAY) >= 10 and _kept(log) >= 3,
    )

    sandbox.update_network({"allow_out": [STAY]})
    queries = internet.read(lambda net: len(net.authoritative_queries(CUT)))
    log = _wait(
        sandbox,
        f"the stream from {CUT} cut and the new connections tried",
        lambda log: _ended(log, CUT) is not None and _new(log, "stay") != "",
    )
    assert _ended(log, CUT) == "cut", _show(log)
    failed = _failed(log)
    assert failed is not None and failed == _kept(log), _show(log)  # the request after the last ok
    assert _new(log, "name").startswith("refused gaierror"), _show(log)  # the name is not resolved
    assert _new(log, "sni").startswith("refused SSL"), _show(log)  # the handshake is refused (SNI)
    assert _new(log, "http").startswith("status 403"), _show(log)  # the Host is refused
    assert _new(log, "stay") == "status 200", _show(log)
    assert internet.read(lambda net: len(net.authoritative_queries(CUT))) == queries
    flowing = _bytes(log, STAY)
    log = _wait(
        sandbox,
        f"the stream from {STAY} still flowing",
        lambda log: _bytes(log, STAY) >= flowing + 20,
    )
    assert _ended(log, STAY) is None, _show(log)
    assert not [line for line in log if line.startswith(("error ", "keep never"))], _show(log)
    network = sandbox.get_info().network
    assert network is not None and network["allow_out"] == [STAY]
    reached = neighbour.commands.run(f"curl -sS --max-time 60 https://{CUT}/neighbour")
    assert f'"host": "{CUT}"' in reached.stdout  # another org's sandbox: unaffected

    # The fake internet's side: the cut stream ended upstream too, the removed host got
    # only what was asked before the update (and the neighbour's request).
    _until(
        internet,
        f"the fake {CUT} server seeing its stream end",
        lambda net: _drip_end(net, CUT) == "cut",
    )
    paths = internet.read(lambda net: [h.path for h in net.hits if CUT in (h.sni, h.host)])
    asked = {f"/drip/{DRIP}", "/neighbour", *(f"/keep/{i}" for i in range(failed + 1))}
    assert set(paths) <= asked and paths.count("/neighbour") == 1, paths
    assert internet.read(lambda net: _drip_end(net, STAY)) is None

    sandbox.update_network({"allow_internet_access": False})
    _wait(
        sandbox,
        f"the stream from {STAY} cut once nothing is allowed",
        lambda log: _ended(log, STAY) == "cut",
    )
    network = sandbox.get_info().network
    assert network is not None and network["deny_out"] == ["0.0.0.0/0"]
    _until(
        internet,
        f"the fake {STAY} server seeing its stream end",
        lambda net: _drip_end(net, STAY) == "cut",
    )
    assert internet.read(FakeInternet.canary_hits) == 0


def _wait(sandbox: Sandbox, what: str, done: Callable[[list[str]], bool]) -> list[str]:
    """The guest client's log once `done(log)`; fails with the log after `WAIT` seconds."""
    deadline = time.monotonic() + WAIT
    while not done(log := _log(sandbox)):
        assert time.monotonic() < deadline, f"not seen in {WAIT}s: {what}\n" + "\n".join(log)
        time.sleep(POLL)
    return log


def _until(internet: FakeInternetThread, what: str, done: Callable[[FakeInternet], bool]) -> None:
    deadline = time.monotonic() + WAIT
    while not internet.read(done):
        assert time.monotonic() < deadline, f"not seen in {WAIT}s: {what}"
        time.sleep(POLL)


def _log(sandbox: Sandbox) -> list[str]:
    try:
        return sandbox.files.read(LOG).splitlines()
    except NotFoundException:
        return []


def _bytes(log: list[str], host: str) -> int:
    counts = [
        int(m[1]) for line in log if (m := re.fullmatch(rf"{re.escape(host)} bytes (\d+)", line))
    ]
    return max(counts, default=0)


def _ended(log: list[str], host: str) -> str | None:
    """`done` or `cut` once the stream from `host` ended."""
    ends = [line.split()[1] for line in log if re.match(rf"{re.escape(host)} (done|cut) ", line)]
    return ends[0] if ends else None


def _kept(log: list[str]) -> int:
    return sum(1 for line in log if line.startswith("keep ok "))


def _failed(log: list[str]) -> int | None:
    failed = [int(line.split()[2]) for line in log if line.startswith("keep failed ")]
    return failed[0] if failed else None


def _new(log: list[str], label: str) -> str:
    """What the new connection `label` got (`""` until it was tried)."""
    found = [line.split(" ", 2)[2] for line in log if line.startswith(f"new {label} ")]
    return found[0] if found else ""


def _drip_end(net: FakeInternet, host: str) -> str | None:
    ends = [d.ended for d in net.drips if d.hit.sni == host]
    assert len(ends) == 1, ends
    return ends[0]


def _show(log: list[str]) -> str:
    return "the guest client's log:\n" + "\n".join(log)
