"""Three `space node` workers, two `space api` replicas and a `space controller` on one
machine over one database: each node on the throw-away resources of its own
`tests.e2e.server.SpaceServer` (data dir, run dir, namespace prefix), so each
server's sweep finds what its node leaves; the control plane on the first one's.

Each node runs in a network namespace of its own acting as a host (`HostNamespace`
`sph<server tag>`, made by `start()`): the control plane, in the root namespace,
reaches it at the namespace side of its veth pair, and it reaches a database on the
host's loopback through a `TcpRelay` on the pair's host side. `stop()` removes the
namespaces and the relay whatever else fails. The namespace joins only the node's
network (`nsenter --net`): the sandbox namespaces it adds stay visible to the host."""

from __future__ import annotations

import secrets
from pathlib import Path

from sqlalchemy.engine import make_url

from tests.e2e.server import SpaceServer, free_port
from tests.scaleout.cluster import Cluster
from tests.scaleout.hostns import HostNamespace
from tests.scaleout.relay import TcpRelay

# Seconds without a heartbeat before a node is lost: long enough that a busy CI machine
# (three workers booting VMs under TCG) never delays a live node's heartbeat past it.
LOST_AFTER = 20
HEARTBEAT = 2


class ManyNodes:
    def __init__(self, servers: list[SpaceServer]) -> None:
        self.primary = servers[0]
        self.tokens = self.primary.root / "node-tokens"
        self.tokens.mkdir(mode=0o700)
        database = self.primary.env.get(
            "SPACE_DATABASE_URL", f"sqlite:///{self.primary.data_dir}/space.db"
        )
        self.shared = {
            "SPACE_DATABASE_URL": database,
            "SPACE_CLUSTER_HEARTBEAT_SECONDS": str(HEARTBEAT),
            "SPACE_CLUSTER_LOST_AFTER_SECONDS": str(LOST_AFTER),
        }
        self.hosts = {
            f"node{i}-{s.tag}": HostNamespace(f"sph{s.tag}") for i, s in enumerate(servers)
        }
        self.nodes = {
            name: Cluster(s, self.hosts[name]) for name, s in zip(self.hosts, servers, strict=True)
        }
        self.control = Cluster(self.primary)
        self.second_api = free_port()
        url = make_url(database)
        self._relay = TcpRelay((url.host, url.port or 5432)) if url.host else None
        self._databases: dict[str, str] = {}

    @property
    def api_urls(self) -> list[str]:
        return [self.primary.url, f"http://127.0.0.1:{self.second_api}"]

    def token_of(self, name: str) -> Path:
        return self.tokens / name

    def start(self) -> None:
        for name, node in self.nodes.items():
            token = self.token_of(name)
            token.write_text(secrets.token_hex(32))
            token.chmod(0o600)
            node.token_file = token
            self.hosts[name].create()
            self._databases[name] = self._database_from(self.hosts[name])
            self.start_node(name)
        link = {
            **self.shared,
            "SPACE_CLUSTER_NODE_TOKENS_DIR": str(self.tokens),
            "SPACE_CLUSTER_REFRESH_SECONDS": "1",
        }
        replicas = (
            ("api", self.primary.port, self.primary.ingress_port),
            ("api2", self.second_api, free_port()),
        )
        for name, port, ingress in replicas:
            env = {**link, "SPACE_INGRESS_PORT": str(ingress)}
            self.control.spawn_as(name, "api", ["--port", str(port)], **env)
            self.control.healthy(name, f"http://127.0.0.1:{port}/healthz")
        self.control.spawn_as(
            "controller", "controller", [], SPACE_CONTROLLER_RECONCILE_INTERVAL="1", **link
        )

    def _database_from(self, host: HostNamespace) -> str:
        """The database's URL from inside `host`: through the relay on its host-side
        address (the database's own address, a file, for SQLite)."""
        database = self.shared["SPACE_DATABASE_URL"]
        if self._relay is None:
            return database
        url = make_url(database).set(
            host=host.host_address, port=self._relay.open(host.host_address)
        )
        return url.render_as_string(hide_password=False)

    def start_node(self, name: str) -> None:
        """Node `name` (again: it adopts the VMs a killed run left)."""
        env = {**self.shared, "SPACE_DATABASE_URL": self._databases[name]}
        self.nodes[name].start_node(SPACE_CLUSTER_NODE_NAME=name, **env)

    def stop(self) -> list[str]:
        """Stop the control plane, then the nodes; the namespaces and the relay go even
        if that fails."""
        try:
            forced = [self.control.stop_one(name) for name in ("api", "api2", "controller")]
            forced += [node.stop_one("node") for node in self.nodes.values()]
            return [why for why in forced if why]
        finally:
            for host in self.hosts.values():
                host.delete()
            if self._relay is not None:
                self._relay.close()
