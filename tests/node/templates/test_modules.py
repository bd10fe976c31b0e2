from __future__ import annotations

import lzma
from pathlib import Path

import pytest

from space.node.templates.errors import ModuleResolveError
from space.node.templates.modules import (
    GUEST_MODULES,
    install_modules,
    load_order,
    module_name,
    parse_modules_dep,
    wanted_modules,
)

# The shape of Debian 12's cloud kernel: deps listed with the one loaded last first.
SAMPLE_DEP = """\
kernel/drivers/virtio/virtio.ko: kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/virtio/virtio_ring.ko:
kernel/drivers/virtio/virtio_mmio.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/char/hw_random/virtio-rng.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/char/virtio_console.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/block/virtio_blk.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/net/virtio_net.ko: kernel/drivers/net/net_failover.ko kernel/net/core/failover.ko kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/net/net_failover.ko: kernel/net/core/failover.ko
kernel/net/core/failover.ko:
kernel/fs/ext4/ext4.ko.xz: kernel/fs/mbcache.ko.xz kernel/fs/jbd2/jbd2.ko.xz kernel/lib/crc16.ko.xz
kernel/fs/mbcache.ko.xz:
kernel/fs/jbd2/jbd2.ko.xz:
kernel/lib/crc16.ko.xz:
"""  # noqa: E501


def test_module_name_normalises_dashes_and_suffixes() -> None:
    assert module_name("kernel/drivers/char/hw_random/virtio-rng.ko") == "virtio_rng"
    assert module_name("kernel/fs/ext4/ext4.ko.zst") == "ext4"
    assert module_name("a/b/c.ko.xz") == "c"
    with pytest.raises(ModuleResolveError):
        module_name("kernel/fs/ext4/README")


def test_guest_modules_load_in_the_order_design_12_names() -> None:
    order = load_order(parse_modules_dep(SAMPLE_DEP), GUEST_MODULES)
    assert order == [
        "virtio_ring",
        "virtio",
        "virtio_mmio",
        "virtio_blk",
        "failover",
        "net_failover",
        "virtio_net",
        "virtio_console",
        "virtio_rng",
    ]


def test_every_dependency_precedes_its_user_whatever_the_listing_order() -> None:
    entries = parse_modules_dep(SAMPLE_DEP)
    shuffled = {
        name: type(entry)(entry.path, tuple(reversed(entry.deps)))
        for name, entry in entries.items()
    }
    for table in (entries, shuffled):
        order = load_order(table, ["ext4", *GUEST_MODULES])
        assert len(order) == len(set(order))
        for name in order:
            for dep in table[name].deps:
                assert order.index(dep) < order.index(name), (dep, name)


def test_missing_module_names_who_needed_it() -> None:
    entries = parse_modules_dep("kernel/a.ko: kernel/b.ko\n")
    with pytest.raises(ModuleResolveError, match="module b not in modules.dep .needed by a"):
        load_order(entries, ["a"])
    with pytest.raises(ModuleResolveError, match="module zz not in modules.dep"):
        load_order(entries, ["zz"])


def test_cycles_are_reported() -> None:
    entries = parse_modules_dep("kernel/a.ko: kernel/b.ko\nkernel/b.ko: kernel/a.ko\n")
    with pytest.raises(ModuleResolveError, match="cycle: a -> b -> a"):
        load_order(entries, ["a"])


def test_root_fs_modules_only_when_the_config_builds_them_as_modules() -> None:
    assert wanted_modules("CONFIG_EXT4_FS=y\nCONFIG_CRYPTO_CRC32C=y\n") == list(GUEST_MODULES)
    assert wanted_modules("CONFIG_EXT4_FS=m\n# CONFIG_FOO is not set\n") == [
        "ext4",
        *GUEST_MODULES,
    ]


def test_install_decompresses_modules_and_writes_the_load_order(tmp_path: Path) -> None:
    moddir = tmp_path / "modules"
    files = {
        "kernel/net/core/failover.ko.xz": b"\x7fELF failover",
        "kernel/drivers/net/net_failover.ko.xz": b"\x7fELF net_failover",
    }
    for rel, data in files.items():
        (moddir / rel).parent.mkdir(parents=True, exist_ok=True)
        (moddir / rel).write_bytes(lzma.compress(data))
    (moddir / "modules.dep").write_text(
        "kernel/drivers/net/net_failover.ko.xz: kernel/net/core/failover.ko.xz\n"
        "kernel/net/core/failover.ko.xz:\n"
    )
    dest = tmp_path / "out"
    order = install_modules(moddir, ["net_failover"], dest)
    assert order == ["failover", "net_failover"]
    assert (dest / "net_failover.ko").read_bytes() == b"\x7fELF net_failover"
    assert (dest / "load-order").read_text() == "failover\nnet_failover\n"
