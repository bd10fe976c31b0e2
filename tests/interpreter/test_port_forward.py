"""`E2b-Sandbox-Port` forwarding (space.api.port_forward) behind real uvicorn, over the
fake node: what `e2b-code-interpreter` relies on with E2B_SANDBOX_URL set."""

from __future__ import annotations

import select
import socket
import socketserver
import threading
from collections.abc import Callable, Iterator

import httpx
import pytest

from tests.conftest import ServerThread
from tests.control.fakes import FakeNode

pytestmark = [pytest.mark.ingress, pytest.mark.interpreter]
GUEST_PORT = 49999
WAIT = 30.0


class Guest:
    """The guest server's stand-in: records each request, answers with a chunked body
    whose second chunk waits for `release()`, and notes when its client went away."""

    def __init__(self) -> None:
        self.requests: list[bytes] = []
        self._wake_r, self._wake_w = socket.socketpair()
        self.client_gone = threading.Event()

    def release(self) -> None:
        self._wake_w.send(b"x")

    def close(self) -> None:
        self._wake_r.close()
        self._wake_w.close()

    def handle(self, conn: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(
            (int(line.split(b":")[1]) for line in head.lower().split(b"\r\n")
             if line.startswith(b"content-length:")), 0)  # fmt: skip
        while len(body) < length:
            body += conn.recv(65536)
        self.requests.append(head + b"\r\n\r\n" + body)
        conn.sendall(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nx-guest: yes\r\n\r\n")
        conn.sendall(b"4\r\none\n\r\n")
        readable, _, _ = select.select([conn, self._wake_r], [], [], WAIT)
        if self._wake_r in readable:
            conn.sendall(b"4\r\ntwo\n\r\n0\r\n\r\n")
        elif conn in readable and conn.recv(1) == b"":
            self.client_gone.set()


@pytest.fixture
def guest(fake_node: FakeNode) -> Iterator[tuple[Guest, Callable[[str], None]]]:
    stand_in = Guest()

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            stand_in.handle(self.request)

    listener = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    listener.daemon_threads = True
    threading.Thread(target=listener.serve_forever, daemon=True).start()

    def expose(sandbox_id: str) -> None:
        fake_node.ports[sandbox_id, GUEST_PORT] = listener.server_address[1]

    yield stand_in, expose
    listener.shutdown()
    listener.server_close()
    stand_in.close()


def _sandbox(server: ServerThread, key: str, **body: object) -> dict[str, object]:
    answer = httpx.post(
        f"{server.url}/v1/sandboxes", json=body, headers={"authorization": f"Bearer {key}"}
    )
    assert answer.status_code == 201, answer.text
    created: dict[str, object] = answer.json()
    return created


def _to(sandbox_id: object, port: int = GUEST_PORT) -> dict[str, str]:
    return {"e2b-sandbox-id": str(sandbox_id), "e2b-sandbox-port": str(port)}


def test_a_request_goes_to_the_port_and_its_answer_streams_back(
    server: ServerThread, make_key: Callable[..., str], guest: tuple[Guest, Callable[[str], None]]
) -> None:
    stand_in, expose = guest
    sandbox = _sandbox(server, make_key("acme"))
    expose(str(sandbox["id"]))
    with httpx.Client(base_url=server.url, timeout=WAIT) as http:  # no API key: a sandbox URL
        with http.stream(
            "POST", "/execute?x=1", json={"code": "print(1)"}, headers=_to(sandbox["id"])
        ) as answer:
            assert answer.status_code == 200 and answer.headers["x-guest"] == "yes"
            lines = answer.iter_lines()
            assert next(lines) == "one"  # before the guest has finished its answer
            stand_in.release()
            assert list(lines) == ["two"]
    [request] = stand_in.requests
    head, _, body = request.partition(b"\r\n\r\n")
    assert head.startswith(b"POST /execute?x=1 HTTP/1.1\r\n")
    assert f"host: {GUEST_PORT}-{sandbox['id']}.".encode() in head
    assert b"connection: close" in head
    assert body == b'{"code":"print(1)"}'


def test_a_client_that_leaves_closes_the_guest_connection(
    server: ServerThread, make_key: Callable[..., str], guest: tuple[Guest, Callable[[str], None]]
) -> None:
    stand_in, expose = guest
    sandbox = _sandbox(server, make_key("acme"))
    expose(str(sandbox["id"]))
    with httpx.Client(base_url=server.url, timeout=WAIT) as http:
        with http.stream("POST", "/execute", json={}, headers=_to(sandbox["id"])) as answer:
            assert next(answer.iter_lines()) == "one"
    assert stand_in.client_gone.wait(WAIT)  # the guest sees it leave (and interrupts)


def test_refusals(
    server: ServerThread, make_key: Callable[..., str], guest: tuple[Guest, Callable[[str], None]]
) -> None:
    _stand_in, expose = guest
    key = make_key("acme")
    public = _sandbox(server, key)
    private = _sandbox(server, key, allow_public_traffic=False)
    expose(str(public["id"]))
    expose(str(private["id"]))
    token = private["ingress"]["traffic_access_token"]  # type: ignore[index]
    cases = [
        (_to("sb-nosuch"), 404, "not_found"),
        (_to(public["id"], 9), 502, "port_closed"),
        ({**_to(public["id"]), "e2b-sandbox-port": "70000"}, 400, "bad_request"),
        ({"e2b-sandbox-port": "49999"}, 400, "bad_request"),
        (_to(private["id"]), 403, "forbidden"),
        ({**_to(private["id"]), "e2b-traffic-access-token": "wrong"}, 403, "forbidden"),
    ]
    with httpx.Client(base_url=server.url, timeout=WAIT) as http:
        for headers, status, code in cases:
            answer = http.get("/contexts", headers=headers)
            assert (answer.status_code, answer.json()["error"]["code"]) == (status, code), headers
        _stand_in.release()
        allowed = http.get(
            "/contexts", headers={**_to(private["id"]), "e2b-traffic-access-token": token}
        )
        assert (allowed.status_code, allowed.text) == (200, "one\ntwo\n")


def test_the_envd_port_is_not_forwarded(
    server: ServerThread, make_key: Callable[..., str], guest: tuple[Guest, Callable[[str], None]]
) -> None:
    _stand_in, expose = guest
    sandbox = _sandbox(server, make_key("acme"))
    expose(str(sandbox["id"]))
    answer = httpx.get(f"{server.url}/health", headers=_to(sandbox["id"], 49983))
    assert answer.status_code == 204  # envd's own /health route
