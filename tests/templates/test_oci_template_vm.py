"""Issue 12, must-show 1: an OCI archive built here becomes a template, and a sandbox
from it sees the marker, the image's ENV, its non-root USER and WORKDIR, and not the
file its upper layer whites out.

The image is a busybox root (the cached `busybox-static` SPACE's own `busybox`
template uses) in two layers. The node gets a cache of its own whose entries link
to the shared guest images, so the imported template is seen by this node only.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from space.node.local import LocalNode
from space.node.templates.busybox import fetch_busybox
from space.node.templates.cache import Cache
from space.node.templates.imports import import_template
from space.node.templates.registry import IMAGE_KIND, REGISTRY_DIR
from space.seam.values import ExecRequest, SandboxSpec
from tests.node.templates.images import Entry, directory, file, layer_tar, oci_layout, symlink
from tests.throwaway import CACHE_DIR, built_images, throwaway_node

pytestmark = [
    pytest.mark.templates,
    pytest.mark.vm,
    pytest.mark.netns,
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.skipif(os.geteuid() != 0, reason="VM tests need root"),
]

MARKER = "made-by-an-oci-image"
WORKDIR = "/srv/app"
PASSWD = "root:x:0:0:root:/root:/bin/sh\nalice:x:1000:1000:alice:/home/alice:/bin/sh\n"


def _busybox_layer(cache_dir: Path) -> bytes:
    busybox = fetch_busybox(Cache(cache_dir))
    entries: list[Entry] = [directory(d) for d in ("bin", "sbin", "usr", "usr/bin", "usr/sbin")]
    entries.append(file("bin/busybox", busybox.binary.read_bytes(), mode=0o755))
    entries += [symlink(a, "/bin/busybox") for a in busybox.applets if a != "bin/busybox"]
    entries += [
        directory("etc"),
        file("etc/passwd", PASSWD),
        file("etc/group", "root:x:0:\nalice:x:1000:\n"),
        file("etc/marker", MARKER + "\n"),
        file("etc/doomed", "whited out by the upper layer\n"),
        directory("home"),
        directory("home/alice", uid=1000, gid=1000, mode=0o750),
        file("home/alice/notes", "mine\n", uid=1000, gid=1000, mode=0o600),
    ]
    return layer_tar(entries)


def _private_cache(tmp: Path) -> Path:
    """A cache whose entries are the shared one's (links), holding imports of its own."""
    built_images()
    tmp.mkdir()
    for entry in CACHE_DIR.iterdir():
        if not entry.name.startswith(".") and entry.name not in (REGISTRY_DIR, IMAGE_KIND):
            (tmp / entry.name).symlink_to(entry)
    return tmp


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def imported(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[tuple[LocalNode, str]]:
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("VM tests need qemu-system-x86")
    work = tmp_path_factory.mktemp("oci")
    cache = _private_cache(work / "cache")
    upper = layer_tar([file("etc/.wh.doomed")])
    config = {"Env": ["GREETING=hello-from-the-image"], "User": "alice", "WorkingDir": WORKDIR}
    archive = oci_layout([_busybox_layer(cache), upper], **config).write_archive(work / "img.tar")
    name = f"oci-{secrets.token_hex(3)}"
    import_template(cache, name, f"oci-archive:{archive}")
    async with throwaway_node(work / "data", "oci", cache_dir=cache) as node:
        sandbox_id = f"o{secrets.token_hex(5)}"
        await node.create_sandbox(SandboxSpec(sandbox_id=sandbox_id, template=name))
        yield node, sandbox_id


async def _sh(node: LocalNode, sandbox_id: str, cmd: str, **kw: object) -> str:
    result = await node.exec(sandbox_id, ExecRequest(cmd=cmd, **kw))  # type: ignore[arg-type]
    assert result.exit_code == 0, result.stderr
    return result.stdout.decode().strip()


async def test_a_sandbox_from_an_oci_image_has_its_files_env_user_and_workdir(
    imported: tuple[LocalNode, str],
) -> None:
    node, sandbox_id = imported
    assert await _sh(node, sandbox_id, "cat /etc/marker") == MARKER
    assert await _sh(node, sandbox_id, "echo $GREETING") == "hello-from-the-image"
    assert await _sh(node, sandbox_id, "id -u") == "1000"
    assert await _sh(node, sandbox_id, "pwd") == WORKDIR
    assert await _sh(node, sandbox_id, "cat /home/alice/notes") == "mine"
    gone = await node.exec(sandbox_id, ExecRequest(cmd="test -e /etc/doomed"))
    assert gone.exit_code == 1


async def test_the_request_overrides_the_image_defaults(imported: tuple[LocalNode, str]) -> None:
    node, sandbox_id = imported
    env = {"GREETING": "from-the-request"}
    assert await _sh(node, sandbox_id, "echo $GREETING", env=env) == "from-the-request"
    assert await _sh(node, sandbox_id, "pwd", cwd="/tmp") == "/tmp"
