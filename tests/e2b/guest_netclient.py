"""Runs in the guest (stdlib only): connections through the gateway held open across
a network update. `python3 guest_netclient.py LOG CUT STAY ADDRESS DRIP`, where CUT
and STAY are allowed hosts (the update will remove CUT), ADDRESS is CUT's address
and DRIP the length of each download (`/drip/<DRIP>`, a byte per 0.1 s).
Each event is a line appended to LOG as it happens:

- one streaming download (`/drip/<n>`) from each of CUT and STAY, on its own
  connection: `<host> bytes <k>` every 10 bytes, then `<host> done <k>` or
  `<host> cut <k> <error>`;
- requests on one kept-alive connection to CUT (`auto_open` off: never a quiet
  reconnect): `keep ok <i>` each, until one fails: `keep failed <i> <error>`; then
  new connections: to CUT by name (`new name ...`), to ADDRESS with CUT's SNI
  (`new sni ...`), to ADDRESS over plain HTTP with CUT's Host (`new http ...`),
  and to STAY by name (`new stay ...`), each `status <n>` or `refused <error>`;
- `error <what> <error>` if a part fails in a way none of the above names.

Bounded: every socket has a timeout, the downloads DRIP bytes, the kept-alive
connection `ROUNDS` requests; `exit` is the last line.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable

ROUNDS = 3000  # 10 minutes at PACE
PACE = 0.2  # between two requests on the kept-alive connection
TIMEOUT = 60

LOG, CUT, STAY, ADDRESS = sys.argv[1:5]
DRIP = int(sys.argv[5])
_lock = threading.Lock()


def log(line: str) -> None:
    with _lock, open(LOG, "a") as out:
        out.write(line + "\n")


def drip(host: str) -> None:
    count = 0
    try:
        conn = http.client.HTTPSConnection(host, timeout=TIMEOUT)
        conn.request("GET", f"/drip/{DRIP}")
        response = conn.getresponse()
        log(f"{host} status {response.status}")
        while response.read(1):
            count += 1
            if count % 10 == 0:
                log(f"{host} bytes {count}")
        log(f"{host} {'done' if count == DRIP else 'cut'} {count} eof")
    except Exception as exc:  # the point: how the stream ended
        log(f"{host} cut {count} {type(exc).__name__}")


def keepalive() -> None:
    conn = http.client.HTTPSConnection(CUT, timeout=TIMEOUT)
    conn.connect()
    conn.auto_open = 0
    for i in range(ROUNDS):
        try:
            conn.request("GET", f"/keep/{i}")
            response = conn.getresponse()
            response.read()
        except Exception as exc:
            log(f"keep failed {i} {type(exc).__name__}")
            break
        log(f"keep ok {i} {response.status}")
        time.sleep(PACE)
    else:
        log("keep never failed")
        return
    attempt("name", lambda: _https(CUT, CUT, "/new/name"))
    attempt("sni", lambda: _https(ADDRESS, CUT, "/new/sni"))
    attempt("http", lambda: _plain(ADDRESS, CUT, "/new/http"))
    attempt("stay", lambda: _https(STAY, STAY, "/new/stay"))


def attempt(label: str, request: Callable[[], int]) -> None:
    try:
        status = request()
    except Exception as exc:
        log(f"new {label} refused {type(exc).__name__} {exc}")
    else:
        log(f"new {label} status {status}")


def guarded(what: str, part: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        try:
            part()
        except Exception as exc:
            log(f"error {what} {type(exc).__name__} {exc}")

    return run


def _https(address: str, sni: str, path: str) -> int:
    context = ssl.create_default_context()
    with socket.create_connection((address, 443), timeout=TIMEOUT) as sock:
        with context.wrap_socket(sock, server_hostname=sni) as tls:
            return _exchange(tls, sni, path)


def _plain(address: str, host: str, path: str) -> int:
    with socket.create_connection((address, 80), timeout=TIMEOUT) as sock:
        return _exchange(sock, host, path)


def _exchange(sock: socket.socket, host: str, path: str) -> int:
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    head = b""
    while b"\r\n" not in head and len(head) < 4096:
        data = sock.recv(4096)
        if not data:
            break
        head += data
    return int(head.split(b" ", 2)[1])


def main() -> None:
    threads = [
        threading.Thread(target=guarded("drip", lambda: drip(CUT))),
        threading.Thread(target=guarded("drip", lambda: drip(STAY))),
        threading.Thread(target=guarded("keepalive", keepalive)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DRIP * 0.1 + 2 * TIMEOUT)
    log("exit")


if __name__ == "__main__":
    main()
