import { base64url, sessionKey, start } from "./common.js";

// An xterm.js terminal on GET /v1/sandboxes/{id}/pty: binary frames carry keystrokes
// and output, text frames resize (out) and the exit (in). The key travels in the
// `bearer.<base64url>` subprotocol, since a browser cannot set WebSocket headers.
const CHUNK = 16 * 1024;
const id = document.body.dataset.sandbox;
const me = await start();
const box = document.getElementById("terminal");
const status = document.getElementById("terminal-status");

function connect() {
  const term = new globalThis.Terminal({ cursorBlink: true, scrollback: 5000 });
  const fit = new globalThis.FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open(box);
  fit.fit();
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const query = `rows=${term.rows}&cols=${term.cols}`;
  const url = `${scheme}//${location.host}/v1/sandboxes/${encodeURIComponent(id)}/pty?${query}`;
  const socket = new WebSocket(url, ["space.pty.v1", "bearer." + base64url(sessionKey())]);
  socket.binaryType = "arraybuffer";
  const encoder = new TextEncoder();
  socket.addEventListener("open", () => {
    status.textContent = "connected";
    box.dataset.state = "open";
    term.focus();
  });
  socket.addEventListener("message", (event) => {
    if (typeof event.data === "string") {
      const message = JSON.parse(event.data);
      if (message.type === "exit") status.textContent = `exited (${message.exit_code})`;
      return;
    }
    term.write(new Uint8Array(event.data));
  });
  socket.addEventListener("close", (event) => {
    box.dataset.state = "closed";
    if (!status.textContent.startsWith("exited")) {
      status.textContent = `disconnected (${event.code}${event.reason ? ": " + event.reason : ""})`;
    }
  });
  term.onData((data) => {
    const bytes = encoder.encode(data);
    for (let i = 0; i < bytes.length; i += CHUNK) socket.send(bytes.subarray(i, i + CHUNK));
  });
  term.onResize(({ rows, cols }) => {
    if (socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify({ type: "resize", rows, cols }));
  });
  addEventListener("resize", () => fit.fit());
}

if (me && box) connect();
