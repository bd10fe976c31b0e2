"""Three `space node` workers, two `space api` replicas and a `space controller` on one
host over one database: each node on the throw-away resources of its own
`tests.e2e.server.SpaceServer` (data dir, run dir, namespace prefix), so each
server's sweep finds what its node leaves; the control plane on the first one's."""

from __future__ import annotations

import secrets
from pathlib import Path

from tests.e2e.server import SpaceServer, free_port
from tests.scaleout.cluster import Cluster

LOST_AFTER = 6  # seconds without a heartbeat before a node is lost
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
        self.nodes = {f"node{i}-{s.tag}": Cluster(s) for i, s in enumerate(servers)}
        self.control = Cluster(self.primary)
        self.second_api = free_port()

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

    def start_node(self, name: str) -> None:
        """Node `name` (again: it adopts the VMs a killed run left)."""
        self.nodes[name].start_node(SPACE_CLUSTER_NODE_NAME=name, **self.shared)

    def stop(self) -> list[str]:
        forced = [self.control.stop_one(name) for name in ("api", "api2", "controller")]
        forced += [node.stop_one("node") for node in self.nodes.values()]
        return [why for why in forced if why]
