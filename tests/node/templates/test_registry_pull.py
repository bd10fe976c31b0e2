"""A registry reference becomes a template: a real registry (Debian's docker-registry)
on loopback, an image pushed to it with skopeo, `import_template("docker://...")`
pulling it back into an ext4 root with its defaults; TLS is verified unless the
registry is named insecure; a malformed reference is refused."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from space.node.templates.errors import ImageError
from space.node.templates.imports import import_template
from tests.e2e.server import free_port
from tests.node.templates.test_imports import CONFIG, _archive, _debugfs
from tests.waiting import wait_until

pytestmark = [
    pytest.mark.templates,
    pytest.mark.skipif(os.geteuid() != 0, reason="keeping owners needs root"),
]

POLICY = {"default": [{"type": "insecureAcceptAnything"}]}


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[str]:
    """`127.0.0.1:PORT` of a registry serving plain HTTP, stopped after the test."""
    binary = shutil.which("docker-registry")
    assert binary is not None, "install docker-registry (scripts/bootstrap does)"
    address = f"127.0.0.1:{free_port()}"
    config = tmp_path / "registry.yml"
    storage = tmp_path / "registry-data"
    config.write_text(
        json.dumps(
            {
                "version": 0.1,
                "storage": {"filesystem": {"rootdirectory": str(storage)}},
                "http": {"addr": address},
            }
        )
    )
    proc = subprocess.Popen(
        [binary, "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_until(lambda: _answers(f"http://{address}/v2/"), 30)
        yield address
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def push(tmp_path: Path, registry: str, reference: str) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(POLICY))
    archive = _archive(tmp_path)
    argv = ["skopeo", "copy", "--quiet", f"--policy={policy}", "--dest-tls-verify=false"]
    subprocess.run([*argv, archive, f"docker://{registry}/{reference}"], check=True, timeout=120)


def test_an_image_in_a_registry_becomes_a_template(tmp_path: Path, registry: str) -> None:
    push(tmp_path, registry, "team/busy:1")
    cache = tmp_path / "cache"
    source = f"docker://{registry}/team/busy:1"
    imported = import_template(cache, "pulled", source, insecure=(registry,))
    assert imported.version.source == source
    assert "lower" in _debugfs(imported.rootfs, "cat /etc/marker")
    assert "doomed" not in _debugfs(imported.rootfs, "ls /etc")  # the whiteout held
    assert imported.record.defaults.env["GREETING"] == "hello"
    assert imported.record.defaults.user == CONFIG["User"]
    assert not any((cache / ".pulls").iterdir())  # the pulled layout is gone


def test_tls_is_verified_and_references_are_checked(tmp_path: Path, registry: str) -> None:
    push(tmp_path, registry, "team/busy:1")
    with pytest.raises(ImageError, match="pulling .* failed"):
        import_template(tmp_path / "cache", "pulled", f"docker://{registry}/team/busy:1")
    for bad in ("docker://", "docker://no-repo", "docker://h/r:bad tag", "docker://h/R"):
        with pytest.raises(ImageError, match="is not docker://"):
            import_template(tmp_path / "cache", "pulled", bad)
