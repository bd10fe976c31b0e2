"""`scripts/image`: SPACE's container image as an OCI archive, and SPACE running in it.

The module builds the image once (`scripts/image` caches the archive by commit in
SPACE_IMAGE_DIR, so a second run only reads it), checks the archive's OCI layout,
labels and what makes its digest reproducible (a full second build is not run here:
it costs about a minute; `scripts/image --force` twice and compare the digest lines),
then loads it into Debian's podman and runs `space up` in a privileged container on a
network namespace the test makes: a sandbox is created and runs `echo hello`, is
suspended, the container is stopped and started again over the same data volume, and
the sandbox is still there and runs again. The container mounts the host's guest image
cache and apt lists, so `space up` finds the kernel, initramfs and `base` template the
host built (from the same package index) instead of building them without a mirror.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import os
import secrets
import subprocess
import sys
import tarfile
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.deploy.podman import Podman
from tests.prerequisites import require_root, require_tool
from tests.scaleout.hostns import HostNamespace
from tests.throwaway import built_images

pytestmark = [pytest.mark.image, pytest.mark.timeout(1200)]

ROOT = Path(__file__).resolve().parents[2]
API_PORT = 8080
HEALTH_TIMEOUT = 300.0
CREATE_TIMEOUT = 300.0
IMAGE_UID = "10001:10001"
PYC_CHECKED_HASH = 0b11  # the flags word of a .pyc validated by its source's hash (PEP 552)


@dataclass(frozen=True)
class Image:
    archive: Path
    name: str  # NAME:TAG
    digest: str  # the manifest's, sha256:...


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.fixture(scope="module")
def image() -> Image:
    require_root("scripts/image runs mmdebstrap --mode=root and chroot")
    for tool, package in (("mmdebstrap", "mmdebstrap"), ("umoci", "umoci"), ("git", "git")):
        require_tool(tool, f"apt-get install {package}")
    env = {**os.environ, "PYTHON": sys.executable}
    done = subprocess.run(
        [str(ROOT / "scripts" / "image")], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"scripts/image failed:\n{done.stderr[-4000:]}"
    fields = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    return Image(Path(fields["archive"]), fields["image"], fields["digest"])


def read_layout(archive: Path) -> dict[str, bytes]:
    """Every file of the archive but the layer blobs, by path; the layers' digests checked."""
    files: dict[str, bytes] = {}
    with tarfile.open(archive) as tar:
        for member in tar:
            if not member.isfile():
                continue
            extracted = tar.extractfile(member)
            assert extracted is not None
            if member.size > 1 << 20:  # a layer: hash it as it streams
                digest = hashlib.sha256()
                while chunk := extracted.read(1 << 20):
                    digest.update(chunk)
                assert member.name.endswith(digest.hexdigest()), member.name
            else:
                files[member.name] = extracted.read()
    return files


def blob(files: dict[str, bytes], digest: str) -> Any:
    data = files[f"blobs/sha256/{digest.removeprefix('sha256:')}"]
    assert hashlib.sha256(data).hexdigest() == digest.removeprefix("sha256:")
    return json.loads(data)


def test_archive_is_an_oci_layout_with_labels(image: Image) -> None:
    files = read_layout(image.archive)
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    (entry,) = json.loads(files["index.json"])["manifests"]
    assert entry["digest"] == image.digest
    assert entry["annotations"] == {
        "org.opencontainers.image.ref.name": image.name.rsplit(":", 1)[1],
        "io.containerd.image.name": f"docker.io/library/{image.name}",  # what kind imports
    }
    manifest = blob(files, image.digest)
    assert entry["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    (layer,) = manifest["layers"]
    assert layer["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip"
    config = blob(files, manifest["config"]["digest"])

    commit, epoch = git("rev-parse", "HEAD"), int(git("log", "-1", "--format=%ct", "HEAD"))
    created = datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    version = tomllib.loads(git("show", "HEAD:pyproject.toml"))["project"]["version"]
    labels = config["config"]["Labels"]
    assert labels["org.opencontainers.image.revision"] == commit
    assert labels["org.opencontainers.image.version"] == version
    assert labels["org.opencontainers.image.created"] == created
    assert labels["org.opencontainers.image.title"] == "space"
    assert manifest["annotations"] == labels
    assert image.name == f"space:{version}"
    assert (config["os"], config["architecture"]) == ("linux", "amd64")
    # Non-root unless a process needs root: the chart runs `space node` as uid 0.
    assert config["config"]["User"] == IMAGE_UID
    assert config["config"]["Entrypoint"] == ["/usr/bin/tini", "--"]
    assert any(e.startswith("PATH=/opt/space/bin:") for e in config["config"]["Env"])
    # Reproducible: every timestamp the image records is the commit's.
    assert config["created"] == created
    assert {h["created"] for h in config["history"]} == {created}
    with tarfile.open(image.archive) as tar:
        assert {m.mtime for m in tar} == {epoch} and {(m.uid, m.gid) for m in tar} == {(0, 0)}


def test_the_chart_and_the_kind_guide_name_the_image(image: Image) -> None:
    """The chart's default image (its appVersion) and the kind values are what
    scripts/image tags by default, and the kind guide loads that archive."""
    repository, tag = image.name.split(":")
    chart = yaml.safe_load((ROOT / "deploy/helm/space/Chart.yaml").read_text())
    defaults = yaml.safe_load((ROOT / "deploy/helm/space/values.yaml").read_text())["image"]
    assert (defaults["repository"], defaults["tag"] or chart["appVersion"]) == (repository, tag)
    kind = yaml.safe_load((ROOT / "deploy/kind/values.yaml").read_text())["image"]
    assert (kind["repository"], kind.get("tag") or chart["appVersion"]) == (repository, tag)
    guide = (ROOT / "deploy/kind/README.md").read_text()
    assert "scripts/image" in guide and "kind load image-archive" in guide


def test_the_root_filesystem_is_reproducible_and_clean(image: Image) -> None:
    """What the layer holds: the venv, the `space` user, and none of what makes two
    builds differ: no timestamp past the commit's, no timestamp-checked .pyc in the
    venv, no logs or caches the package tools leave, no host's resolv.conf."""
    epoch = int(git("log", "-1", "--format=%ct", "HEAD"))
    names: set[str] = set()
    pyc_flags: set[int] = set()
    passwd = b""
    with tarfile.open(image.archive) as outer:
        (layer,) = [m for m in outer if m.size > 1 << 20]
        stream = outer.extractfile(layer)
        assert stream is not None
        with gzip.open(stream) as raw, tarfile.open(fileobj=raw, mode="r|") as rootfs:
            for member in rootfs:
                name = member.name.removeprefix("./")
                names.add(name)
                assert member.mtime <= epoch, name
                if name.startswith("opt/space/") and name.endswith(".pyc"):
                    head = rootfs.extractfile(member)
                    assert head is not None
                    pyc_flags.add(int.from_bytes(head.read(8)[4:8], "little"))
                elif name == "etc/passwd":
                    handle = rootfs.extractfile(member)
                    assert handle is not None
                    passwd = handle.read()
    assert "opt/space/bin/space" in names and "usr/bin/qemu-system-x86_64" in names
    assert "usr/bin/mmdebstrap" in names and "usr/bin/tini" in names
    assert pyc_flags == {PYC_CHECKED_HASH}
    assert not any(n.startswith("opt/space/lib/python3.11/site-packages/pip/") for n in names)
    assert b"space:x:10001:10001:" in passwd
    for unstable in ("var/log/dpkg.log", "var/log/apt/history.log", "var/cache/ldconfig/aux-cache",
                     "etc/resolv.conf", "etc/hostname"):  # fmt: skip
        assert unstable not in names
    # The package index stays: the node builds its guest images from it (docs/adr/0007).
    assert any(n.startswith("var/lib/apt/lists/") and n.endswith("InRelease") for n in names)


def test_skopeo_reads_the_archive(image: Image, tmp_path: Path) -> None:
    require_tool("skopeo", "apt-get install skopeo")
    done = subprocess.run(
        ["skopeo", "inspect", f"oci-archive:{image.archive}"], capture_output=True, text=True,
        env={**os.environ, "TMPDIR": str(tmp_path)}, timeout=120, check=True,
    )  # fmt: skip
    inspected = json.loads(done.stdout)
    assert inspected["Digest"] == image.digest
    assert inspected["Labels"]["org.opencontainers.image.revision"] == git("rev-parse", "HEAD")


# -- SPACE in the image, under podman ---------------------------------------------------------


@pytest.fixture
def podman() -> Iterator[Podman]:
    require_root("podman runs a privileged container")
    for tool in ("podman", "runc"):
        require_tool(tool, "apt-get install podman runc")
    tag = secrets.token_hex(3)
    # Short, outside pytest's deep tmp_path: the data volume holds the pool's loop mount.
    root = Path(f"/var/tmp/space-image-{tag}")
    root.mkdir()
    engine = Podman(root, tag)
    yield engine
    forced = engine.close()
    assert not forced, "left on the host after the container was removed:\n" + "\n".join(forced)


@pytest.fixture
def namespace() -> Iterator[HostNamespace]:
    """The container's network: a namespace of this test's own, a veth to the host."""
    ns = HostNamespace(f"spimg{secrets.token_hex(3)}")
    ns.create()
    yield ns
    ns.delete()


def start_space_up(podman: Podman, image: Image, namespace: HostNamespace, data: Path) -> str:
    """`space up` in a privileged container on `namespace`, `data` its data volume, the
    host's guest image cache and apt lists (the index the cache is keyed on) mounted."""
    built_images()  # this tree's guest images, in the host cache the container mounts
    cache = Path(os.environ.get("SPACE_CACHE_DIR", "/var/cache/space"))
    container = f"space-image-{namespace.name}"
    podman(
        "run", "--detach", "--name", container, *podman.run_args(),
        "--privileged", "--user", "0",  # VMs, loop devices, namespaces, nftables
        "--network", f"ns:{namespace.path}",
        "--volume", f"{data}:/var/lib/space",
        "--volume", f"{cache}:/var/cache/space",
        "--volume", "/var/lib/apt/lists:/var/lib/apt/lists:ro",
        "--env", "SPACE_ACCEL=tcg",
        "--env", "SPACE_NODE_WARM_POOL={}",  # one VM: the sandbox's
        "--env", "SPACE_POOL_SIZE=16G",
        "--env", f"SPACE_NODE_RUN_DIR=/run/{container}",
        "--env", "SPACE_VMM_UID_BASE=910000000",  # apart from VMMs of tests on the host
        image.name, "space", "up", "--host", "0.0.0.0", "--port", str(API_PORT),
    )  # fmt: skip
    return container


def wait_healthy(url: str, container: str, podman: Podman) -> None:
    deadline = time.monotonic() + HEALTH_TIMEOUT
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        state = podman("inspect", "--format", "{{.State.Status}}", container).strip()
        assert state == "running", f"container {state}:\n{podman('logs', container)[-4000:]}"
        time.sleep(0.5)
    raise AssertionError(f"/healthz not 200 in {HEALTH_TIMEOUT}s:\n{podman('logs', container)}")


def exec_in(http: httpx.Client, sandbox: str, cmd: str) -> Any:
    return http.post(f"/v1/sandboxes/{sandbox}/exec", json={"cmd": cmd}).json()


@pytest.mark.vm
@pytest.mark.netns
def test_space_up_in_podman_keeps_a_sandbox_across_a_restart(
    image: Image, podman: Podman, namespace: HostNamespace
) -> None:
    loaded = podman("load", "--input", str(image.archive), timeout=600)
    assert f"Loaded image: docker.io/library/{image.name}" in loaded
    data = podman.root / "data"
    data.mkdir()
    container = start_space_up(podman, image, namespace, data)
    url = f"http://{namespace.node_address}:{API_PORT}"
    wait_healthy(url, container, podman)
    key = (data / "admin.key").read_text().strip()  # README: the first start writes it there
    client = functools.partial(
        httpx.Client, base_url=url, headers={"Authorization": f"Bearer {key}"},
        timeout=CREATE_TIMEOUT,
    )  # fmt: skip
    with client() as http:
        created = http.post("/v1/sandboxes", json={"template": "base"})
        assert created.status_code == 201, created.text
        sandbox = created.json()["id"]
        assert created.json()["state"] == "running"
        assert exec_in(http, sandbox, "echo hello") == {
            "exit_code": 0, "stdout": "hello\n", "stderr": ""
        }  # fmt: skip
        written = http.put(f"/v1/sandboxes/{sandbox}/files?path=/root/kept", content=b"kept\n")
        assert written.is_success, written.text
        # A container's VMs end with it: a running sandbox would come back `error`
        # (its VM lost); a suspended one is on the data volume and restores.
        suspended = http.post(f"/v1/sandboxes/{sandbox}/suspend")
        assert suspended.json()["state"] == "suspended", suspended.text

    podman("stop", "--time", "60", container)
    podman("start", container)
    wait_healthy(url, container, podman)

    with client() as http:
        assert [s["id"] for s in http.get("/v1/sandboxes").json()["sandboxes"]] == [sandbox]
        assert http.get(f"/v1/sandboxes/{sandbox}").json()["state"] == "suspended"
        assert exec_in(http, sandbox, "cat /root/kept; echo hello") == {
            "exit_code": 0, "stdout": "kept\nhello\n", "stderr": ""
        }  # fmt: skip
        assert http.delete(f"/v1/sandboxes/{sandbox}").status_code == 204
    podman("stop", "--time", "60", container)
