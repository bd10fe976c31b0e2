"""Run inside a sandbox (stdlib only): HTTP/1.1 with keep-alive on the port given
(`PORT [CERT KEY]`: over TLS with that certificate and key).

`GET /who` the connection's client port (so keep-alive is visible), `POST /count` the
byte count of a (chunked) streamed body, `GET /events` five server-sent events,
`GET /ws` a WebSocket that echoes text frames, `GET /page` an HTML page whose script
fetches `/who` into it.
"""

import base64
import hashlib
import ssl
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
PAGE = b"""<!doctype html><title>guest page</title><p id="who">loading</p><script>
fetch("/who").then(r => r.text()).then(t => {
  document.getElementById("who").textContent = "guest port " + t;
});
</script>"""


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _send(self, body: bytes, kind: str = "text/plain") -> None:
        self.send_response(200)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/who":
            self._send(str(self.client_address[1]).encode())
        elif self.path == "/events":
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("connection", "close")
            self.end_headers()
            for n in range(5):
                self.wfile.write(f"data: event {n}\n\n".encode())
                self.wfile.flush()
            self.close_connection = True
        elif self.path == "/page":
            self._send(PAGE, "text/html")
        elif self.path == "/ws":
            self._websocket()
        else:
            self.send_error(404)

    def do_POST(self) -> None:
        total = 0
        if self.headers.get("transfer-encoding") == "chunked":
            while size := int(self.rfile.readline().strip(), 16):
                total += len(self.rfile.read(size))
                self.rfile.readline()
            self.rfile.readline()
        else:
            total = len(self.rfile.read(int(self.headers.get("content-length", 0))))
        self._send(str(total).encode())

    def _websocket(self) -> None:
        key = self.headers["sec-websocket-key"]
        accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
        self.send_response(101)
        self.send_header("upgrade", "websocket")
        self.send_header("connection", "Upgrade")
        self.send_header("sec-websocket-accept", accept)
        self.end_headers()
        self.wfile.flush()
        while True:
            head = self.rfile.read(2)
            if len(head) < 2 or head[0] & 0x0F == 8:  # closed, or a close frame
                break
            size = head[1] & 0x7F
            if size == 126:
                size = int.from_bytes(self.rfile.read(2), "big")
            mask = self.rfile.read(4)
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(self.rfile.read(size)))
            reply = bytes([0x81, len(data)]) if len(data) < 126 else bytes([0x81, 126])
            if len(data) >= 126:
                reply += len(data).to_bytes(2, "big")
            self.wfile.write(reply + data)
            self.wfile.flush()
        self.close_connection = True


server = ThreadingHTTPServer(("0.0.0.0", int(sys.argv[1])), Handler)
if len(sys.argv) == 4:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(sys.argv[2], sys.argv[3])
    server.socket = context.wrap_socket(server.socket, server_side=True)
server.serve_forever()
