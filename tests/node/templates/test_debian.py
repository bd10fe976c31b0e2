from __future__ import annotations

from pathlib import Path

import pytest

from space.node.templates import debian
from space.node.templates.debian import AptSource, host_sources
from space.node.templates.errors import BuildError

DEB822 = """\
Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://mirror.example/debian
Suites: bookworm
Components: main

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main contrib
"""


def _etc(tmp_path: Path, files: dict[str, str]) -> Path:
    (tmp_path / "sources.list.d").mkdir()
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def test_deb822_sources_for_the_suite_and_its_siblings(tmp_path: Path) -> None:
    etc = _etc(tmp_path, {"sources.list.d/debian.sources": DEB822})
    assert host_sources("bookworm", etc) == (
        AptSource("http://mirror.example/debian", "bookworm", ("main",)),
        AptSource("http://mirror.example/debian", "bookworm-updates", ("main",)),
        AptSource(
            "http://mirror.example/debian-security", "bookworm-security", ("main", "contrib")
        ),
    )
    assert (
        host_sources("bookworm", etc)[0].line() == "deb http://mirror.example/debian bookworm main"
    )


def test_one_line_sources_skip_options_and_other_suites(tmp_path: Path) -> None:
    etc = _etc(
        tmp_path,
        {
            "sources.list": "deb [arch=amd64 signed-by=/k.gpg] http://m.example/debian bookworm"
            " main\n# deb http://old.example/debian bookworm main\n",
            "sources.list.d/cloud.list": "deb https://pkgs.example/apt cloud-sdk-bookworm main\n",
            "sources.list.d/off.list.disabled": "deb http://x.example/debian bookworm main\n",
        },
    )
    assert host_sources("bookworm", etc) == (
        AptSource("http://m.example/debian", "bookworm", ("main",)),
    )


def test_no_source_for_the_suite_is_an_error(tmp_path: Path) -> None:
    etc = _etc(tmp_path, {"sources.list": "deb http://m.example/debian trixie main\n"})
    with pytest.raises(BuildError, match="no apt source for suite 'bookworm'"):
        host_sources("bookworm", etc)


def _counting_apt(monkeypatch: pytest.MonkeyPatch, index: str) -> list[str]:
    """apt-cache answers (counted) for any package, with the package index `index`."""
    asked: list[str] = []

    def fake_run(cmd: object, **_: object) -> bytes:
        asked.append(str(cmd))
        return b"Package: hello\nVersion: 2.10-3\nDepends: libc6 (>= 2.34)\n"

    debian._apt_show.cache_clear()
    monkeypatch.setattr(debian, "run", fake_run)
    monkeypatch.setattr(debian, "index_digest", lambda: index)
    return asked


def test_a_restarted_process_finds_apt_answers_in_the_memo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = _counting_apt(monkeypatch, "idx1")
    first = debian.package_fields("hello", tmp_path)
    debian._apt_show.cache_clear()  # as in a new process
    assert (
        debian.package_fields("hello", tmp_path)
        == first
        == {
            "Package": "hello",
            "Version": "2.10-3",
            "Depends": "libc6 (>= 2.34)",
        }
    )
    assert len(asked) == 1


def test_a_new_package_index_asks_apt_again_and_forgets_the_old_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = _counting_apt(monkeypatch, "idx1")
    debian.package_fields("hello", tmp_path)
    monkeypatch.setattr(debian, "index_digest", lambda: "idx2")
    debian.package_fields("hello", tmp_path)
    assert len(asked) == 2
    assert [p.name for p in tmp_path.iterdir()] == ["idx2"]


def test_a_damaged_memo_entry_is_asked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = _counting_apt(monkeypatch, "idx1")
    (tmp_path / "idx1").mkdir()
    (tmp_path / "idx1" / "hello.json").write_text('{"Version": ')
    assert debian.package_fields("hello", tmp_path)["Version"] == "2.10-3"
    assert len(asked) == 1
    assert debian.package_fields("hello", tmp_path)["Version"] == "2.10-3"
    assert len(asked) == 1
