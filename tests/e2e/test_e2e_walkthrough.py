"""What a person does first: the README's curl walk-through, then the `space sandbox` CLI."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import ServerFactory
from tests.e2e.server import SpaceServer, space_binary

pytestmark = [pytest.mark.vm, pytest.mark.netns, pytest.mark.timeout(900)]

README = Path(__file__).parents[2] / "README.md"
README_KEY_FILE = "/var/lib/space/admin.key"
README_API = "http://127.0.0.1:8080"


def walkthrough() -> tuple[str, list[str]]:
    """The curl block of the README and the outputs its `# ...` comments promise."""
    found = re.search(r"## Walk-through with curl\n+```sh\n(.*?)```", README.read_text(), re.S)
    assert found is not None, "README.md has no `## Walk-through with curl` sh block"
    block = found.group(1)
    expected = [line.removeprefix("# ") for line in block.splitlines() if line.startswith("# ")]
    return block, expected


def test_readme_curl_walkthrough(space_server: ServerFactory, tmp_path: Path) -> None:
    block, expected = walkthrough()
    assert README_KEY_FILE in block and README_API in block
    assert expected == ['{"exit_code":0,"stdout":"hello\\n","stderr":""}', "some data"]
    server = space_server()
    server.start()
    key_file = tmp_path / "admin.key"
    key_file.write_text(server.key + "\n")
    script = block.replace(README_KEY_FILE, str(key_file)).replace(README_API, server.url)

    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], capture_output=True, text=True, timeout=600
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == expected
    with server.client() as http:
        assert http.get("/v1/sandboxes").json()["sandboxes"] == []


def space(server: SpaceServer, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPACE_")}
    env.update(SPACE_API_URL=server.url, SPACE_API_KEY=server.key)
    return subprocess.run(
        [space_binary(), "sandbox", *args], capture_output=True, text=True, env=env, timeout=600
    )


def test_cli_create_ls_exec_cp_rm(space_server: ServerFactory, tmp_path: Path) -> None:
    server = space_server()
    server.start()
    created = space(server, "create")
    assert created.returncode == 0, created.stderr
    sandbox_id = created.stdout.strip()
    server.seen.add(sandbox_id)

    listed = space(server, "ls").stdout.splitlines()
    assert listed[0].split() == ["ID", "TEMPLATE", "STATE", "REASON"]
    assert listed[1].split() == [sandbox_id, "base", "running"]

    shell = space(server, "exec", sandbox_id, "echo out; echo err >&2; exit 3")
    assert (shell.returncode, shell.stdout, shell.stderr) == (3, "out\n", "err\n")
    argv = space(server, "exec", sandbox_id, "--", "uname", "-s")
    assert (argv.returncode, argv.stdout) == (0, "Linux\n")

    local = tmp_path / "notes.txt"
    local.write_text("from the host\n")
    assert space(server, "cp", str(local), f"{sandbox_id}:/root/").returncode == 0
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    assert space(server, "cp", f"{sandbox_id}:/root/notes.txt", str(downloads)).returncode == 0
    assert (downloads / "notes.txt").read_text() == "from the host\n"

    missing = space(server, "cp", f"{sandbox_id}:/root/missing", str(tmp_path / "missing"))
    assert missing.returncode == 1 and "file_not_found" in missing.stderr
    assert not (tmp_path / "missing").exists()
    no_local = space(server, "cp", str(tmp_path / "absent"), f"{sandbox_id}:/root/absent")
    assert no_local.returncode == 1 and no_local.stderr.startswith("error:")

    assert space(server, "rm", sandbox_id).returncode == 0
    assert sandbox_id not in space(server, "ls").stdout
    gone = space(server, "rm", sandbox_id)
    assert gone.returncode == 1 and "not_found" in gone.stderr
