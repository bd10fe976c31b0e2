"""`space node`, `space api` and `space controller` as three processes on one host,
over the throw-away resources of a `tests.e2e.server.SpaceServer` (data dir, run dir,
namespace prefix, ports, database): the server's sweep then finds what they leave.

The node listens on the host's loopback, or, given a `HostNamespace` (created by the
caller), runs inside that network namespace listening on every address and registers
itself at the namespace side of its veth pair, where the control plane reaches it."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from tests.e2e.server import HEALTH_TIMEOUT, STOP_TIMEOUT, SpaceServer, free_port, space_binary
from tests.scaleout.hostns import HostNamespace
from tests.throwaway import built_images


class Cluster:
    def __init__(self, server: SpaceServer, host: HostNamespace | None = None) -> None:
        self.server = server
        self.host = host
        self.token_file = server.root / "node.token"
        self.token_file.write_text(secrets.token_hex(32))
        self.token_file.chmod(0o600)
        self.node_port = free_port()
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._data_dirs: dict[str, Path] = {}  # of replicas with a data dir of their own
        self._ports: dict[str, int] = {}  # their ingress ports

    @property
    def node_url(self) -> str:
        """Where the node answers (in a namespace: once that is created)."""
        address = "127.0.0.1" if self.host is None else self.host.node_address
        return f"http://{address}:{self.node_port}"

    def log(self, name: str) -> Path:
        return self.server.root / f"space-{name}.log"

    def start(self) -> None:
        """The node, then the API, then the controller, each once it answers."""
        built_images()
        link = {"SPACE_NODE_URL": self.node_url, "SPACE_NODE_TOKEN_FILE": str(self.token_file)}
        self.start_node()
        self.spawn_as("api", "api", ["--port", str(self.server.port)], **link)
        self.healthy("api", f"{self.server.url}/healthz")
        self.spawn_as(
            "controller", "controller", [], SPACE_CONTROLLER_RECONCILE_INTERVAL="1", **link
        )

    def start_node(self, **env: str) -> None:
        args = ["--port", str(self.node_port)]
        within: list[str] = []
        if self.host is not None:  # nsenter execs the node: the pid is the node's
            args += ["--host", "0.0.0.0"]
            within = ["nsenter", f"--net={self.host.path}"]
            env = {"SPACE_CLUSTER_NODE_ADDRESS": self.node_url, **env}
        self.spawn_as(
            "node",
            "node",
            args,
            within=within,
            **{
                "SPACE_NODE_TOKEN_FILE": str(self.token_file),
                "SPACE_NODE_WARM_POOL": "{}",
                "SPACE_NODE_DRAIN_SECONDS": "2",
                "SPACE_CLUSTER_NODE_NAME": f"node-{self.server.tag}",
                **env,
            },
        )
        self.healthy("node", f"{self.node_url}/healthz")

    def start_replica(self, name: str, port: int, wait: bool = True) -> None:
        """Another `space api`, as on another host: a data dir of its own, the same
        database, node and credential key files (mounted from one Secret in a chart);
        `wait`: until it answers (else `healthy` later)."""
        keys = self.server.data_dir
        self._data_dirs[name] = self.server.root / f"data-{name}"
        self._ports.setdefault(name, free_port())
        self.spawn_as(
            name,
            "api",
            ["--port", str(port)],
            SPACE_DATABASE_URL=self.server.env.get(
                "SPACE_DATABASE_URL", f"sqlite:///{keys / 'space.db'}"
            ),
            SPACE_INGRESS_PORT=str(self._ports[name]),
            SPACE_NODE_URL=self.node_url,
            SPACE_NODE_TOKEN_FILE=str(self.token_file),
            SPACE_CREDENTIALS_KEY_FILE=str(keys / "credentials.key"),
            SPACE_CREDENTIALS_PLACEHOLDER_KEY_FILE=str(keys / "credentials-placeholder.key"),
        )
        if wait:
            self.healthy(name, f"http://127.0.0.1:{port}/healthz")

    def spawn_as(
        self, name: str, command: str, args: list[str], within: Sequence[str] = (), **env: str
    ) -> None:
        """`space <command> args` on the data dir of `name` (this server's, unless it is a
        replica of its own; run by the command `within` names, if any), known here as
        `name`."""
        data = self._data_dirs.get(name, self.server.data_dir)
        argv = [*within, space_binary(), command, "--data-dir", str(data), *args]
        with self.log(name).open("ab") as log:
            self._procs[name] = subprocess.Popen(
                argv,
                env={**self.server.env, **env},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def healthy(self, name: str, url: str) -> None:
        deadline = time.monotonic() + HEALTH_TIMEOUT
        while time.monotonic() < deadline:
            if self._procs[name].poll() is not None:
                raise RuntimeError(f"space {name} exited:\n{self.tail(name)}")
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"space {name} not healthy:\n{self.tail(name)}")

    def kill(self, name: str, sig: int) -> None:
        """Send `sig` to one process (not its group: the VMs a node started run on)."""
        self._procs[name].send_signal(sig)
        self._procs[name].wait(timeout=STOP_TIMEOUT)

    def signal(self, name: str, sig: int) -> None:
        """Send `sig` to one process and go on (`alive` tells when it is gone)."""
        self._procs[name].send_signal(sig)

    def alive(self, name: str) -> bool:
        return self._procs[name].poll() is None

    def tail(self, name: str, lines: int = 40) -> str:
        text = self.log(name).read_text(errors="replace") if self.log(name).exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> list[str]:
        """SIGTERM the API, the controller, then the node; the ones that needed a SIGKILL."""
        apis = [name for name in self._procs if name.startswith("api")]
        forced = [self.stop_one(name) for name in (*apis, "controller", "node")]
        return [why for why in forced if why]

    def stop_one(self, name: str) -> str:
        """SIGTERM one process (SIGKILL after STOP_TIMEOUT: then why, else "")."""
        proc = self._procs.get(name)
        if proc is None or proc.poll() is not None:
            return ""
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_TIMEOUT)
            return ""
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return f"space {name} did not stop on SIGTERM:\n{self.tail(name)}"
