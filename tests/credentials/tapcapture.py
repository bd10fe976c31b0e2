"""What crossed a sandbox's tap, both ways, as the byte streams a search needs.

`TapCapture` reads every frame on the tap inside the sandbox's namespace (an
`AF_PACKET` socket made there) while it is open; `streams()` puts the TCP payloads
of each direction of each connection back in sequence order (so a needle split
across segments is still found) and keeps UDP payloads (DNS) whole.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections import defaultdict
from types import TracebackType

from space.gateway.nsock import run_in_netns

ETH_P_ALL = 0x0003
ETH_P_IP = 0x0800
LIMIT = 64 * 1024 * 1024  # bytes of frames kept; a bounded capture
Flow = tuple[bytes, bytes, int, int]


class TapCapture:
    def __init__(self, netns: str, device: str = "tap0") -> None:
        self._sock = run_in_netns(netns, _packet_socket)
        self._sock.bind((device, 0))
        self._sock.settimeout(0.1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self.frames: list[bytes] = []
        self.kept = 0

    def __enter__(self) -> TapCapture:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close()

    def _read(self) -> None:
        while not self._stop.is_set() and self.kept < LIMIT:
            try:
                frame = self._sock.recv(65536)
            except TimeoutError:
                continue
            self.frames.append(frame)
            self.kept += len(frame)

    def streams(self) -> list[bytes]:
        """Each TCP direction's payload in sequence order, then each UDP payload."""
        segments: dict[Flow, dict[int, bytes]] = defaultdict(dict)
        datagrams: list[bytes] = []
        for frame in self.frames:
            _parse(frame, segments, datagrams)
        ordered = [b"".join(part for _, part in sorted(s.items())) for s in segments.values()]
        return ordered + datagrams

    def contains(self, needle: bytes) -> bool:
        return any(needle in stream for stream in self.streams())


def _packet_socket() -> socket.socket:
    return socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))


def _parse(frame: bytes, segments: dict[Flow, dict[int, bytes]], datagrams: list[bytes]) -> None:
    if len(frame) < 34 or struct.unpack("!H", frame[12:14])[0] != ETH_P_IP:
        return
    ip = frame[14:]
    header, total, proto = (ip[0] & 0x0F) * 4, struct.unpack("!H", ip[2:4])[0], ip[9]
    body = ip[header:total]
    if proto == socket.IPPROTO_TCP and len(body) >= 20:
        sport, dport, seq = struct.unpack("!HHI", body[:8])
        payload = body[(body[12] >> 4) * 4 :]
        if payload:
            segments[(ip[12:16], ip[16:20], sport, dport)][seq] = payload
    elif proto == socket.IPPROTO_UDP and len(body) >= 8:
        datagrams.append(body[8:])
