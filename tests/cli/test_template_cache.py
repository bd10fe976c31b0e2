"""`space template import` and `space template ls` over a cache of their own (no VMs)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from space.cli import main
from tests.node.templates.images import docker_archive, file, layer_tar

pytestmark = [
    pytest.mark.templates,
    pytest.mark.skipif(os.geteuid() != 0, reason="keeping owners needs root"),
]


def test_import_then_ls_shows_it_beside_the_built_in_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    layer = layer_tar([file("etc/marker", "x")])
    archive = docker_archive(tmp_path / "d.tar", [layer], Env=["A=1"])
    cache = str(tmp_path / "cache")
    args = ["template", "import", "mine", f"docker-archive:{archive}", "--cache-dir", cache]
    assert main([*args, "--json"]) == 0
    imported = json.loads(capsys.readouterr().out)
    assert (imported["name"], imported["state"]) == ("mine", "imported")
    assert main([*args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "cached"
    assert main(["template", "ls", "--cache-dir", cache, "--json"]) == 0
    listed = {t["name"]: t for t in json.loads(capsys.readouterr().out)}
    assert listed["mine"] == {"name": "mine", "kind": "imported", "manifest": imported["manifest"]}
    assert listed["base"]["kind"] == "built-in"


def test_a_built_in_name_or_a_broken_image_fails_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = docker_archive(tmp_path / "d.tar", [layer_tar([file("f")])])
    cache = ["--cache-dir", str(tmp_path / "cache")]
    assert main(["template", "import", "base", f"docker-archive:{archive}", *cache]) == 1
    assert "'base' is a built-in template" in capsys.readouterr().err
    assert main(["template", "import", "x", f"oci:{tmp_path}", *cache]) == 1
    assert "no oci-layout" in capsys.readouterr().err
