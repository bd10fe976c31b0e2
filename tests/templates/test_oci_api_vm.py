"""An image imported with `space template import` while `space up` runs is a template
of its API at once: `POST /v1/sandboxes {"template": NAME}` and an exec through the API
see the image's files, ENV, USER and WORKDIR."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.e2e.server import SpaceServer, space_binary
from tests.templates.busybox_image import (
    GREETING,
    MARKER,
    WORKDIR,
    busybox_archive,
    private_cache,
)

pytestmark = [
    pytest.mark.templates,
    pytest.mark.vm,
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="VM tests need root"),
]


def test_an_import_is_served_by_a_running_server() -> None:
    root = Path(tempfile.mkdtemp(prefix="space-oci-"))
    cache = private_cache(root / "cache")
    archive = busybox_archive(cache, root / "img.tar")
    server = SpaceServer(root, SPACE_CACHE_DIR=str(cache))
    try:
        server.start()
        name = f"oci-{secrets.token_hex(3)}"
        space = [space_binary(), "template"]
        subprocess.run(
            [*space, "import", name, f"oci-archive:{archive}"], env=server.env, check=True
        )
        listed = subprocess.run([*space, "ls", "--json"], env=server.env, capture_output=True)
        assert name in [t["name"] for t in json.loads(listed.stdout)]
        with server.client() as http:
            sandbox_id = server.create(http, template=name)
            cmd = "cat /etc/marker; echo $GREETING; id -u; pwd; test -e /etc/doomed || echo gone"
            result = http.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"cmd": cmd}).json()
        assert result["exit_code"] == 0, result
        assert result["stdout"].split() == [MARKER, GREETING, "1000", WORKDIR, "gone"]
    finally:
        leaks = server.close()
    assert not leaks, leaks
