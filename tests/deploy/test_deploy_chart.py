"""The Helm chart renders with the real `helm` for every shipped values file, and every
rendered object validates against the Kubernetes schemas (offline, kubernetes-validate)."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from space.config import Settings
from space.credentials.crypto import KEY_BYTES, FileKeyProvider, secret_file
from space.seam import signing

pytestmark = pytest.mark.scaleout

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "space"
HELM = Path(sys.executable).with_name("helm")  # scripts/bootstrap installs it beside python
KUBERNETES = "1.37.0"
VALUES = {
    "default": [],
    "kind": [ROOT / "deploy" / "kind" / "values.yaml"],
    "eks": [ROOT / "deploy" / "eks" / "values.yaml"],
}


def render(*values: Path, sets: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    assert HELM.is_file(), f"{HELM} is missing: run scripts/bootstrap"
    args = [str(HELM), "template", "space", str(CHART), "--namespace", "space"]
    for path in values:
        args += ["--values", str(path)]
    for item in sets:
        args += ["--set", item]
    rendered = subprocess.run(args, check=True, capture_output=True, text=True, timeout=60)
    return [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]


def by_kind(docs: list[dict[str, Any]], kind: str, component: str) -> dict[str, Any]:
    (doc,) = [
        d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(f"-{component}")
    ]
    return doc


def container(workload: dict[str, Any]) -> dict[str, Any]:
    (only,) = workload["spec"]["template"]["spec"]["containers"]
    return only


def env(workload: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(workload)["env"]}


@pytest.mark.parametrize("name", sorted(VALUES))
def test_every_rendered_object_validates(name: str) -> None:
    docs = render(*VALUES[name])
    kinds = sorted(d["kind"] for d in docs)
    for kind in ("DaemonSet", "Deployment", "NetworkPolicy", "PodDisruptionBudget", "Service"):
        assert kind in kinds, f"{name}: no {kind} rendered"
    for doc in docs:
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)


def test_the_validator_rejects_a_broken_object() -> None:
    daemonset = by_kind(render(), "DaemonSet", "node")
    container(daemonset)["privileged"] = True  # belongs in securityContext
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(daemonset, KUBERNETES, strict=True)


def test_commands_probes_and_node_privileges() -> None:
    docs = render()
    api, controller = by_kind(docs, "Deployment", "api"), by_kind(docs, "Deployment", "controller")
    node = by_kind(docs, "DaemonSet", "node")
    assert container(api)["args"][:2] == ["space", "api"]
    assert container(controller)["args"] == ["space", "controller"]
    assert container(node)["args"][:2] == ["space", "node"]
    assert container(api)["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    for probe in ("livenessProbe", "readinessProbe"):
        assert container(node)[probe]["httpGet"] == {"path": "/healthz", "port": "node"}
    assert container(node)["securityContext"]["privileged"] is True
    volumes = node["spec"]["template"]["spec"]["volumes"]
    host = {v["name"]: v["hostPath"] for v in volumes if "hostPath" in v}
    assert host["dev-kvm"] == {"path": "/dev/kvm", "type": "CharDevice"}
    assert host["dev-net-tun"] == {"path": "/dev/net/tun", "type": "CharDevice"}
    assert host["dev-loop-control"]["path"] == "/dev/loop-control"
    assert host["data"]["path"] == "/var/lib/space"
    for workload in (api, controller, node):
        assert env(workload)["SPACE_DATABASE_URL"] == {
            "secretKeyRef": {"name": "space-postgresql", "key": "database-url"}
        }
        assert container(workload)["resources"]["requests"]
        assert container(workload)["resources"]["limits"]


@pytest.mark.parametrize("name", sorted(VALUES))
def test_warm_pools_from_the_values_reach_the_node(name: str) -> None:
    values: dict[str, Any] = {}
    for path in VALUES[name]:
        values = yaml.safe_load(path.read_text())
    expected = values.get("node", {}).get("warmPools") or {"base": 2}
    node = by_kind(render(*VALUES[name]), "DaemonSet", "node")
    assert json.loads(env(node)["SPACE_NODE_WARM_POOL"]) == expected


def test_warm_pools_and_probes_follow_overrides() -> None:
    docs = render(
        sets=(
            "node.warmPools.python=5",
            "api.readinessProbe.periodSeconds=2",
            "node.livenessProbe.failureThreshold=9",
        )
    )
    node = by_kind(docs, "DaemonSet", "node")
    assert json.loads(env(node)["SPACE_NODE_WARM_POOL"]) == {"base": 2, "python": 5}
    assert container(by_kind(docs, "Deployment", "api"))["readinessProbe"]["periodSeconds"] == 2
    assert container(node)["livenessProbe"]["failureThreshold"] == 9


def probe_seconds(probe: dict[str, Any]) -> int:
    """How long `probe` may fail before the kubelet acts."""
    seconds: int = probe.get("initialDelaySeconds", 0) + probe["periodSeconds"] * probe.get(
        "failureThreshold", 3
    )
    return seconds


@pytest.mark.parametrize("name", sorted(VALUES))
def test_node_has_a_startup_probe_for_its_image_builds(name: str) -> None:
    """`space node` builds its guest images before it listens: liveness waits for a
    startup probe on /healthz that allows up to 15 minutes, and follows the values."""
    node = container(by_kind(render(*VALUES[name]), "DaemonSet", "node"))
    startup = node["startupProbe"]
    assert startup["httpGet"] == {"path": "/healthz", "port": "node"}
    assert probe_seconds(startup) == 15 * 60
    assert probe_seconds(node["livenessProbe"]) <= 2 * 60
    longer = render(*VALUES[name], sets=("node.startupProbe.failureThreshold=180",))
    assert probe_seconds(container(by_kind(longer, "DaemonSet", "node"))["startupProbe"]) == 1800
    off = render(*VALUES[name], sets=("node.startupProbe=null",))
    assert "startupProbe" not in container(by_kind(off, "DaemonSet", "node"))


@pytest.mark.parametrize("name", sorted(VALUES))
def test_no_liveness_probe_depends_on_the_database(name: str) -> None:
    """The API's /healthz pings the database: only readiness uses it, so a database
    outage takes replicas out of the Service instead of restarting them all; liveness
    (and startup, which waits for the migration) is a TCP connect. The controller has
    no listener and no probe at all."""
    docs = render(*VALUES[name])
    api = container(by_kind(docs, "Deployment", "api"))
    assert api["livenessProbe"]["tcpSocket"] == {"port": "http"}
    assert api["startupProbe"]["tcpSocket"] == {"port": "http"}
    assert "httpGet" not in api["livenessProbe"] and "httpGet" not in api["startupProbe"]
    assert api["readinessProbe"]["httpGet"]["path"] == "/healthz"
    (http,) = [p for p in api["ports"] if p["name"] == "http"]
    assert api["args"][-1] == str(http["containerPort"])
    controller = container(by_kind(docs, "Deployment", "controller"))
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert probe not in controller
    assert "ports" not in controller


def test_database_secret_existing_created_or_refused() -> None:
    created = render(sets=("postgresql.existingSecret=", "postgresql.url=postgresql://h/db"))
    secret = by_kind(created, "Secret", "postgresql")
    assert secret["stringData"] == {"database-url": "postgresql://h/db"}
    api = by_kind(created, "Deployment", "api")
    assert env(api)["SPACE_DATABASE_URL"]["secretKeyRef"]["name"] == "space-postgresql"
    secrets = [d["metadata"]["name"] for d in render() if d["kind"] == "Secret"]
    assert sorted(secrets) == ["space-credential-keys", "space-node-signing-key"]  # no database
    with pytest.raises(subprocess.CalledProcessError) as refused:
        render(sets=("postgresql.existingSecret=",))
    assert "postgresql.existingSecret" in refused.value.stderr


def test_network_policies_fence_the_node() -> None:
    docs = render()
    node = by_kind(docs, "NetworkPolicy", "node")["spec"]
    (ingress,) = node["ingress"]
    components = sorted(
        p["podSelector"]["matchLabels"]["app.kubernetes.io/component"] for p in ingress["from"]
    )
    assert components == ["api", "controller"]
    assert ingress["ports"] == [{"protocol": "TCP", "port": 8090}]
    egress_ports = [rule.get("ports") for rule in node["egress"]]
    assert [{"protocol": "TCP", "port": 5432}] in egress_ports
    internet = node["egress"][-1]["to"][0]["ipBlock"]
    assert "169.254.0.0/16" in internet["except"]
    controller = by_kind(docs, "NetworkPolicy", "controller")["spec"]
    assert "Ingress" in controller["policyTypes"] and not controller.get("ingress")


def test_kind_workers_carry_what_the_node_daemonset_needs() -> None:
    config = yaml.safe_load((ROOT / "deploy" / "kind" / "kind-config.yaml").read_text())
    node = by_kind(render(*VALUES["kind"]), "DaemonSet", "node")
    selector = node["spec"]["template"]["spec"]["nodeSelector"]
    workers = [n for n in config["nodes"] if n["role"] == "worker"]
    assert workers
    for worker in workers:
        assert selector.items() <= worker["labels"].items()
        mounted = {m["containerPath"] for m in worker["extraMounts"]}
        assert {"/dev/kvm", "/dev/net/tun", "/dev/loop-control"} <= mounted


@pytest.mark.parametrize("name", sorted(VALUES))
def test_each_components_environment_is_valid_settings(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the chart sets is what `Settings` reads (names, JSON, bounds, ordering)."""
    docs = render(*VALUES[name])
    workloads = {
        "api": by_kind(docs, "Deployment", "api"),
        "controller": by_kind(docs, "Deployment", "controller"),
        "node": by_kind(docs, "DaemonSet", "node"),
    }
    for component, workload in workloads.items():
        settings = settings_of(workload, monkeypatch)
        assert settings.data_dir == Path("/var/lib/space"), component
        if component == "node":
            warm = json.loads(env(workload)["SPACE_NODE_WARM_POOL"])
            assert settings.node.warm_pool == warm
            assert settings.accel in ("auto", "kvm", "tcg")
            assert settings.node_link.trust_key_file is not None
            assert settings.node_link.token is None and settings.node_link.token_file is None
        else:
            assert settings.cluster.node_signing_key_file is not None
            assert settings.cluster.drives_nodes
            keys = settings.credentials
            if component == "api":
                assert settings.ingress.host == "0.0.0.0" and settings.ingress.port == 8081
            assert keys.key_path(settings.data_dir) == Path("/run/space-keys/credentials.key")
            assert keys.placeholder_path(settings.data_dir) == Path(
                "/run/space-keys/credentials-placeholder.key"
            )
        if component == "controller":
            election = env(workload)
            assert settings.cluster.lease_seconds == float(election["SPACE_CLUSTER_LEASE_SECONDS"])


@pytest.mark.parametrize("name", sorted(VALUES))
def test_nodes_and_control_plane_share_the_node_token_and_nodes_are_reachable(name: str) -> None:
    """`nodeAuth: token`: the chart hands one Secret's key to the nodes (SPACE_NODE_TOKEN)
    and to the API and controller (SPACE_CLUSTER_NODE_TOKEN), which then drive every
    registered node at the URL it registers (its pod IP)."""
    docs = render(*VALUES[name], sets=("nodeAuth=token",))
    assert not [d for d in docs if d["kind"] == "ConfigMap"]
    node = by_kind(docs, "DaemonSet", "node")
    refs = [env(node)["SPACE_NODE_TOKEN"]["secretKeyRef"]]
    for component in ("api", "controller"):
        refs.append(
            env(by_kind(docs, "Deployment", component))["SPACE_CLUSTER_NODE_TOKEN"]["secretKeyRef"]
        )
    assert all(ref == refs[0] for ref in refs)
    (secret,) = [
        d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == refs[0]["name"]
    ]
    assert len(base64.b64decode(secret["data"][refs[0]["key"]])) >= 32
    assert container(node)["args"][2:4] == ["--host", "0.0.0.0"]
    port = str(container(node)["ports"][0]["containerPort"])
    assert env(node)["SPACE_CLUSTER_NODE_ADDRESS"] == f"http://$(POD_IP):{port}"
    kept = render(*VALUES[name], sets=("nodeAuth=token", "nodeToken.existingSecret=mine"))
    assert not [d for d in kept if d["kind"] == "Secret" and d["metadata"]["name"] == "mine"]
    assert (
        env(by_kind(kept, "DaemonSet", "node"))["SPACE_NODE_TOKEN"]["secretKeyRef"]["name"]
        == "mine"
    )


def pod(workload: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


def mounted_file(workload: dict[str, Any], path: str) -> tuple[dict[str, Any], str]:
    """The volume `path` (in the workload's container) lies on, and its path in it."""
    (mount,) = [
        m for m in container(workload)["volumeMounts"] if path.startswith(m["mountPath"] + "/")
    ]
    (volume,) = [v for v in pod(workload)["volumes"] if v["name"] == mount["name"]]
    return volume, path[len(mount["mountPath"]) + 1 :]


def secret_volume(workload: dict[str, Any], name: str) -> dict[str, Any]:
    (volume,) = [v for v in pod(workload)["volumes"] if v["name"] == name]
    source: dict[str, Any] = volume["secret"]
    return source


def written_by_init(workload: dict[str, Any]) -> str:
    """The init container's shell command, after checking it writes private files as the
    main container's user (a Secret volume's files are group-readable under fsGroup)."""
    (init,) = pod(workload)["initContainers"]
    command: str = init["command"][-1]
    assert init["command"][:2] == ["sh", "-c"] and command.startswith("umask 077 && ")
    user = container(workload)["securityContext"]["runAsUser"]
    assert init["securityContext"]["runAsUser"] == user
    return command


def signing_pair(docs: list[dict[str, Any]]) -> tuple[bytes, bytes]:
    secret = by_kind(docs, "Secret", "node-signing-key")
    config_map = by_kind(docs, "ConfigMap", "node-trust-key")
    private = base64.b64decode(secret["data"]["signing-key.pem"])
    return private, config_map["data"]["trust-key.pem"].encode()


@pytest.mark.parametrize("name", sorted(VALUES))
def test_signed_mode_by_default_private_key_only_in_control_plane_pods(name: str) -> None:
    """The default: the API and controller read the generated private key from a 0600
    copy an init container makes of the Secret; the nodes read only the ConfigMap's
    public key; a token the control plane mints with the one verifies with the other."""
    docs = render(*VALUES[name])
    assert not [d for d in docs if d["metadata"]["name"] == "space-node-token"]
    private, public = signing_pair(docs)
    token = signing.mint(signing.private_key(private), "worker-1", 1e9)
    signing.verify(signing.public_key(public), token, "worker-1", 1e9)
    for component in ("api", "controller"):
        workload = by_kind(docs, "Deployment", component)
        path = env(workload)["SPACE_CLUSTER_NODE_SIGNING_KEY_FILE"]
        volume, _ = mounted_file(workload, path)
        assert volume["emptyDir"] == {"medium": "Memory", "sizeLimit": "1Mi"}
        assert f"> {path}" in written_by_init(workload)
        secrets = [v["secret"]["secretName"] for v in pod(workload)["volumes"] if "secret" in v]
        assert sorted(secrets) == ["space-credential-keys", "space-node-signing-key"]
        assert "SPACE_CLUSTER_NODE_TOKEN" not in env(workload)
    node = by_kind(docs, "DaemonSet", "node")
    volume, key = mounted_file(node, env(node)["SPACE_NODE_TRUST_KEY_FILE"])
    assert volume["configMap"]["name"] == "space-node-trust-key"
    assert volume["configMap"]["items"] == [{"key": "trust-key.pem", "path": key}]
    assert "SPACE_NODE_TOKEN" not in env(node)
    assert_no_private_key_in(node, private)


def assert_no_private_key_in(node: dict[str, Any], private: bytes) -> None:
    """Nothing in the node's pod names the signing Secret or holds the key."""
    text = json.dumps(node)
    assert "node-signing" not in text and "SIGNING" not in text
    assert base64.b64encode(private).decode() not in text and private.decode() not in text
    assert not pod(node).get("initContainers")
    assert not [v for v in pod(node)["volumes"] if "secret" in v or "projected" in v]
    assert not container(node).get("envFrom")


def test_own_signing_key_is_used_and_needs_both_halves() -> None:
    sets = ("nodeSigningKey.existingSecret=my-key", "nodeSigningKey.existingConfigMap=my-pub")
    docs = render(sets=sets)
    assert not [d for d in docs if d["kind"] == "ConfigMap"]
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "Secret"] == [
        "space-credential-keys"
    ]
    api, node = by_kind(docs, "Deployment", "api"), by_kind(docs, "DaemonSet", "node")
    secrets = [v["secret"]["secretName"] for v in pod(api)["volumes"] if "secret" in v]
    assert sorted(secrets) == ["my-key", "space-credential-keys"]
    assert (
        mounted_file(node, env(node)["SPACE_NODE_TRUST_KEY_FILE"])[0]["configMap"]["name"]
        == "my-pub"
    )
    assert "my-key" not in json.dumps(node)
    for half in sets:
        with pytest.raises(subprocess.CalledProcessError) as refused:
            render(sets=(half,))
        assert "nodeSigningKey.existingSecret and nodeSigningKey.existingConfigMap" in (
            refused.value.stderr
        )
    with pytest.raises(subprocess.CalledProcessError) as refused:
        render(sets=("nodeAuth=shared",))
    assert "nodeAuth is signed or token" in refused.value.stderr


@pytest.mark.parametrize("name", sorted(VALUES))
def test_shared_snapshots_off_by_default_nfs_or_a_claim(name: str) -> None:
    node = by_kind(render(*VALUES[name]), "DaemonSet", "node")
    assert "SPACE_NODE_SHARED_SNAPSHOTS" not in env(node)
    assert "shared-snapshots" not in json.dumps(node)
    nfs = ("node.sharedSnapshots.nfs.server=10.0.0.9", "node.sharedSnapshots.nfs.path=/snap")
    claim = ("node.sharedSnapshots.existingClaim=snapshots",)
    for sets, source in (
        (nfs, {"nfs": {"server": "10.0.0.9", "path": "/snap"}}),
        (claim, {"persistentVolumeClaim": {"claimName": "snapshots"}}),
    ):
        docs = render(*VALUES[name], sets=sets)
        node = by_kind(docs, "DaemonSet", "node")
        path = env(node)["SPACE_NODE_SHARED_SNAPSHOTS"]
        assert path == "/var/lib/space-shared"
        (volume,) = [v for v in pod(node)["volumes"] if v["name"] == "shared-snapshots"]
        assert volume == {"name": "shared-snapshots", **source}
        assert {"name": "shared-snapshots", "mountPath": path} in container(node)["volumeMounts"]
        for doc in docs:
            kubernetes_validate.validate(doc, KUBERNETES, strict=True)
    with pytest.raises(subprocess.CalledProcessError) as refused:
        render(sets=nfs + claim)
    assert "not both" in refused.value.stderr


@pytest.mark.parametrize("sets", [(), ("nodeAuth=token",)])
def test_every_object_validates_in_both_auth_modes(sets: tuple[str, ...]) -> None:
    for doc in render(sets=sets):
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)


CREDENTIAL_KEYS = ("SPACE_CREDENTIALS_KEY_FILE", "SPACE_CREDENTIALS_PLACEHOLDER_KEY_FILE")


@pytest.mark.parametrize("name", sorted(VALUES))
@pytest.mark.parametrize("auth", ["signed", "token"])
def test_api_and_controller_mount_the_same_credential_keys(name: str, auth: str) -> None:
    """Both key files, in every API and controller pod, are 0600 copies the init
    container makes of one Secret's keys; no node pod sees them."""
    docs = render(*VALUES[name], sets=(f"nodeAuth={auth}",))
    for component in ("api", "controller"):
        workload = by_kind(docs, "Deployment", component)
        command = written_by_init(workload)
        (init,) = pod(workload)["initContainers"]
        for variable, key in zip(
            CREDENTIAL_KEYS, ("credentials.key", "credentials-placeholder.key"), strict=True
        ):
            path = env(workload)[variable]
            volume, _ = mounted_file(workload, path)
            assert volume["emptyDir"] == {"medium": "Memory", "sizeLimit": "1Mi"}
            source = secret_volume(workload, "credential-keys-secret")
            assert source["secretName"] == "space-credential-keys"
            (item,) = [i for i in source["items"] if i["key"] == key]
            (mount,) = [m for m in init["volumeMounts"] if m["name"] == "credential-keys-secret"]
            assert f"cat {mount['mountPath']}/{item['path']} > {path}" in command
    node = by_kind(docs, "DaemonSet", "node")
    text = json.dumps(node)
    assert "credential" not in text and "CREDENTIALS" not in text


def test_generated_credential_keys_open_and_are_kept(tmp_path: Path) -> None:
    """The Secret's keys are what `FileKeyProvider` and `secret_file` read, written 0600
    (as the init container writes them); a fresh install gets fresh keys, and the
    Secret outlives an uninstall."""
    secrets = []
    for _ in range(2):
        secret = by_kind(render(), "Secret", "credential-keys")
        assert secret["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
        files = {}
        for key, data in secret["data"].items():
            path = tmp_path / f"{len(secrets)}-{key}"
            path.touch(mode=0o600)
            path.write_bytes(base64.b64decode(data))
            files[key] = path
        assert sorted(files) == ["credentials-placeholder.key", "credentials.key"]
        key_id, key = FileKeyProvider(files["credentials.key"]).current()
        assert len(key) == KEY_BYTES and key_id
        placeholder = secret_file(files["credentials-placeholder.key"])
        assert len(placeholder) == KEY_BYTES
        secrets.append((key, placeholder))
    assert secrets[0][0] != secrets[1][0] and secrets[0][1] != secrets[1][1]


def test_own_credential_keys_secret_is_used() -> None:
    """An upgrade keeps the generated Secret's keys (`lookup`, which needs a cluster);
    `credentials.existingSecret` is the same path offline: the chart makes no Secret and
    mounts that one's keys."""
    docs = render(
        sets=(
            "credentials.existingSecret=my-keys",
            "credentials.existingSecretKeys.sealing=sealing.json",
            "credentials.existingSecretKeys.placeholder=placeholder",
        )
    )
    assert not [d for d in docs if "credential-keys" in d["metadata"]["name"]]
    for component in ("api", "controller"):
        workload = by_kind(docs, "Deployment", component)
        source = secret_volume(workload, "credential-keys-secret")
        assert source["secretName"] == "my-keys"
        assert [i["key"] for i in source["items"]] == ["sealing.json", "placeholder"]
        for variable in CREDENTIAL_KEYS:
            assert mounted_file(workload, env(workload)[variable])[0]["name"] == "keys"
    for doc in docs:
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)


def settings_of(workload: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Settings:
    """`Settings` as the container's plain env values make them."""
    with monkeypatch.context() as patch:
        for key in [k for k in os.environ if k.startswith("SPACE_")]:
            patch.delenv(key)
        for key, value in env(workload).items():
            if isinstance(value, str):
                patch.setenv(key, value)
        return Settings()


@pytest.mark.parametrize("name", sorted(VALUES))
def test_sandbox_urls_are_served_on_the_api_services_ingress_port(name: str) -> None:
    """The API's sandbox URL listener (SPACE_INGRESS_PORT) listens on every address,
    is a named container port, a Service port and open in the API's NetworkPolicy; no
    Ingress unless asked for."""
    docs = render(*VALUES[name])
    api = by_kind(docs, "Deployment", "api")
    assert env(api)["SPACE_INGRESS_HOST"] == "0.0.0.0"
    (port,) = [p for p in container(api)["ports"] if p["name"] == "ingress"]
    assert str(port["containerPort"]) == env(api)["SPACE_INGRESS_PORT"] == "8081"
    assert "SPACE_PUBLIC_DOMAIN" not in env(api)
    service = by_kind(docs, "Service", "api")["spec"]
    (served,) = [p for p in service["ports"] if p["name"] == "ingress"]
    assert served["targetPort"] == "ingress" and served["protocol"] == "TCP"
    (rule,) = by_kind(docs, "NetworkPolicy", "api")["spec"]["ingress"]
    assert {"protocol": "TCP", "port": 8081} in rule["ports"]
    assert not [d for d in docs if d["kind"] == "Ingress"]


def test_an_ingress_routes_the_api_host_and_sandbox_urls(monkeypatch: pytest.MonkeyPatch) -> None:
    """`ingress.host`: the API at the host, sandbox URLs at `*.host` on the Service's
    ingress port, TLS for both when a Secret is named; the API's sandbox URLs use the
    host (SPACE_PUBLIC_DOMAIN) unless `api.publicDomain` says otherwise."""
    on = ("ingress.enabled=true", "ingress.host=space.example.com")
    docs = render(sets=(*on, "ingress.className=nginx", "ingress.tls.secretName=space-tls"))
    ingress = by_kind(docs, "Ingress", "api")
    kubernetes_validate.validate(ingress, KUBERNETES, strict=True)
    spec = ingress["spec"]
    assert spec["ingressClassName"] == "nginx"
    assert spec["tls"] == [
        {"hosts": ["space.example.com", "*.space.example.com"], "secretName": "space-tls"}
    ]
    routes = {}
    for rule in spec["rules"]:
        (path,) = rule["http"]["paths"]
        assert path["path"] == "/" and path["pathType"] == "Prefix"
        routes[rule["host"]] = path["backend"]["service"]
    assert routes == {
        "space.example.com": {"name": "space-api", "port": {"name": "http"}},
        "*.space.example.com": {"name": "space-api", "port": {"name": "ingress"}},
    }
    service_ports = {p["name"] for p in by_kind(docs, "Service", "api")["spec"]["ports"]}
    assert service_ports == {"http", "ingress"}
    api = by_kind(docs, "Deployment", "api")
    assert env(api)["SPACE_PUBLIC_DOMAIN"] == "space.example.com"
    assert settings_of(api, monkeypatch).ingress.domain == "space.example.com"
    plain = by_kind(render(sets=on), "Ingress", "api")["spec"]
    assert "tls" not in plain and "ingressClassName" not in plain
    own = render(sets=(*on, "api.publicDomain=sb.example.net"))
    assert env(by_kind(own, "Deployment", "api"))["SPACE_PUBLIC_DOMAIN"] == "sb.example.net"
    with pytest.raises(subprocess.CalledProcessError) as refused:
        render(sets=("ingress.enabled=true",))
    assert "ingress.enabled needs ingress.host" in refused.value.stderr


@pytest.mark.parametrize("name", sorted(VALUES))
def test_api_and_node_pods_carry_prometheus_scrape_annotations(name: str) -> None:
    docs = render(*VALUES[name])
    for kind, component, port in (("Deployment", "api", "8080"), ("DaemonSet", "node", "8090")):
        workload = by_kind(docs, kind, component)
        assert workload["spec"]["template"]["metadata"]["annotations"] == {
            "prometheus.io/scrape": "true",
            "prometheus.io/port": port,
            "prometheus.io/path": "/metrics",
        }
        assert str(container(workload)["ports"][0]["containerPort"]) == port
    controller = by_kind(docs, "Deployment", "controller")
    assert "annotations" not in controller["spec"]["template"]["metadata"]
    off = render(*VALUES[name], sets=("metrics.scrapeAnnotations=false",))
    for kind, component in (("Deployment", "api"), ("DaemonSet", "node")):
        assert "annotations" not in by_kind(off, kind, component)["spec"]["template"]["metadata"]


def test_metrics_from_lets_a_scraper_reach_the_nodes() -> None:
    """`networkPolicy.metricsFrom`: those peers reach the node port (its /metrics needs
    no token; the seam behind it does), and the API port when `apiFrom` fences it."""
    prometheus = {"podSelector": {"matchLabels": {"app": "prometheus"}}}
    scraper = "networkPolicy.metricsFrom[0].podSelector.matchLabels.app=prometheus"
    fenced = "networkPolicy.apiFrom[0].podSelector.matchLabels.app=gateway"
    docs = render(sets=(scraper, fenced))
    node = by_kind(docs, "NetworkPolicy", "node")["spec"]["ingress"]
    assert {"from": [prometheus], "ports": [{"protocol": "TCP", "port": 8090}]} in node
    api = by_kind(docs, "NetworkPolicy", "api")["spec"]["ingress"]
    assert {"from": [prometheus], "ports": [{"protocol": "TCP", "port": 8080}]} in api
    for doc in docs:
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)
    open_api = by_kind(render(sets=(scraper,)), "NetworkPolicy", "api")["spec"]["ingress"]
    assert len(open_api) == 1 and "from" not in open_api[0]


def notes(*values: Path, sets: tuple[str, ...] = ()) -> str:
    """NOTES.txt as `helm install` prints it (a client-side dry run: no cluster)."""
    args = [str(HELM), "install", "space", str(CHART), "--namespace", "space"]
    args += ["--dry-run=client"]
    for path in values:
        args += ["--values", str(path)]
    for item in sets:
        args += ["--set", item]
    done = subprocess.run(args, check=True, capture_output=True, text=True, timeout=60)
    return done.stdout.split("NOTES:\n", 1)[1]


@pytest.mark.parametrize("name", sorted(VALUES))
def test_notes_say_how_to_reach_the_api_get_the_admin_key_and_keep_the_keys(name: str) -> None:
    text = notes(*VALUES[name])
    if name == "eks":
        assert "get service space-api" in text  # a LoadBalancer
        assert "get secret space-bootstrap-key" in text and "SPACE_API_KEY" in text
    else:
        assert "port-forward service/space-api 8080:80 8081:8081" in text
        assert "cat /var/lib/space/admin.key" in text
    assert "Secret space-credential-keys" in text and "Back it" in text
    behind = notes(*VALUES[name], sets=("ingress.enabled=true", "ingress.host=sb.example.com"))
    assert "http://sb.example.com/" in behind and "*.sb.example.com" in behind


def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
    return loaded


def test_the_values_schema_types_every_top_level_value_the_templates_read() -> None:
    typed = set(schema()["properties"])
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(defaults) == typed
    read = set()
    for template in (CHART / "templates").iterdir():
        read |= set(re.findall(r"\.Values\.(\w+)", template.read_text()))
    assert read <= typed, read - typed


@pytest.mark.parametrize(
    ("item", "where"),
    [
        ("node.warmPools=3", "/node/warmPools"),
        ("node.warmPools.base=two", "/node/warmPools/base"),
        ("api.replicas=two", "/api/replicas"),
        ("ingress.enabled=yes", "/ingress/enabled"),
        ("node.accel=hvf", "/node/accel"),
        ("api.ingressPort=70000", "/api/ingressPort"),
    ],
)
def test_helm_refuses_a_value_of_the_wrong_type(item: str, where: str) -> None:
    with pytest.raises(subprocess.CalledProcessError) as refused:
        render(sets=(item,))
    assert "schema" in refused.value.stderr and where in refused.value.stderr


@pytest.mark.parametrize("name", sorted(VALUES))
def test_disruption_budgets_cover_the_api_and_the_controller(name: str) -> None:
    """Each budget selects exactly its Deployment's pods; nodes roll one at a time."""
    docs = render(*VALUES[name])
    budgets = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "PodDisruptionBudget"}
    assert sorted(budgets) == ["space-api", "space-controller"]
    for component in ("api", "controller"):
        budget = budgets[f"space-{component}"]
        workload = by_kind(docs, "Deployment", component)
        assert budget["selector"] == workload["spec"]["selector"]
        assert budget["selector"]["matchLabels"].items() <= (
            workload["spec"]["template"]["metadata"]["labels"].items()
        )
        assert 0 < budget["minAvailable"] < workload["spec"]["replicas"]
    node = by_kind(docs, "DaemonSet", "node")["spec"]["updateStrategy"]
    assert node["rollingUpdate"]["maxUnavailable"] == 1
