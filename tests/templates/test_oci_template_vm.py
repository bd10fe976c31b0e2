"""Issue 12, must-show 1: an OCI archive built here becomes a template, and a sandbox
from it sees the marker, the image's ENV, its non-root USER and WORKDIR, and not the
file its upper layer whites out (`busybox_image.py` builds the image)."""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from space.node.local import LocalNode
from space.node.templates.imports import import_template
from space.seam.values import ExecRequest, SandboxSpec
from tests.templates.busybox_image import (
    GREETING,
    MARKER,
    WORKDIR,
    busybox_archive,
    private_cache,
)
from tests.throwaway import throwaway_node

pytestmark = [
    pytest.mark.templates,
    pytest.mark.vm,
    pytest.mark.netns,
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.skipif(os.geteuid() != 0, reason="VM tests need root"),
]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def imported(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[tuple[LocalNode, str]]:
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("VM tests need qemu-system-x86")
    work = tmp_path_factory.mktemp("oci")
    cache = private_cache(work / "cache")
    archive = busybox_archive(cache, work / "img.tar")
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
    assert await _sh(node, sandbox_id, "echo $GREETING") == GREETING
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
