"""The node's Prometheus metrics, in a registry the node owns (served by `/metrics`).

Histograms, observed where each operation finishes successfully:
- `space_node_create_duration_seconds{path}`: a create, by how the VM came to be:
  `warm` (claimed from the warm pool), `restore` (from the template's base snapshot)
  or `cold` (booted);
- `space_node_exec_duration_seconds`: a command run to completion (`exec`);
- `space_node_restore_duration_seconds`, `space_node_suspend_duration_seconds`.

`space_node_memory_bytes{kind}` is read at scrape time: the host's `total` and
`available` memory (/proc/meminfo) and the guest memory of the node's live VMs
(`guests`, warm ones included). Every label takes only the values listed here, and
each child exists from the start, so a dashboard never queries a missing series.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Literal, Protocol

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from space.node.vmm.base import VmHandle

CreatePath = Literal["warm", "restore", "cold"]
CREATE_PATHS: tuple[CreatePath, ...] = ("warm", "restore", "cold")
#: Seconds; VM operations under TCG take seconds, a warm claim or an exec far less.
BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300)
MEMINFO = Path("/proc/meminfo")
MIB = 1 << 20


class HasVm(Protocol):
    @property
    def vm(self) -> VmHandle | None: ...


class NodeMetrics:
    def __init__(self, live: Callable[[], Iterable[HasVm]], meminfo: Path = MEMINFO) -> None:
        """`live` lists the node's sandboxes and warm VMs (for the guest memory)."""
        self.registry = CollectorRegistry()
        create = Histogram(
            "space_node_create_duration_seconds",
            "Sandbox creates on this node, by path (warm, restore, cold)",
            ["path"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self._create = {path: create.labels(path) for path in CREATE_PATHS}
        self._exec = self._histogram("exec", "Commands run to completion")
        self._restore = self._histogram("restore", "Suspended sandboxes restored")
        self._suspend = self._histogram("suspend", "Sandboxes suspended to a snapshot")
        self.registry.register(_MemoryCollector(live, meminfo))

    def _histogram(self, op: str, documentation: str) -> Histogram:
        return Histogram(
            f"space_node_{op}_duration_seconds",
            documentation,
            buckets=BUCKETS,
            registry=self.registry,
        )

    def created(self, path: CreatePath, started: float) -> None:
        """A create that began at `started` (`time.perf_counter()`) has finished."""
        self._create[path].observe(time.perf_counter() - started)

    def executed(self, started: float) -> None:
        self._exec.observe(time.perf_counter() - started)

    def restored(self, started: float) -> None:
        self._restore.observe(time.perf_counter() - started)

    def suspended(self, started: float) -> None:
        self._suspend.observe(time.perf_counter() - started)


class _MemoryCollector(Collector):
    def __init__(self, live: Callable[[], Iterable[HasVm]], meminfo: Path) -> None:
        self._live = live
        self._meminfo = meminfo

    def collect(self) -> Iterator[Metric]:
        host = _meminfo(self._meminfo)
        guests = sum(item.vm.config.memory_mib for item in self._live() if item.vm is not None)
        family = GaugeMetricFamily(
            "space_node_memory_bytes",
            "Host memory (total, available) and the guest memory of live VMs (guests)",
            labels=["kind"],
        )
        family.add_metric(["total"], host.get("MemTotal", 0))
        family.add_metric(["available"], host.get("MemAvailable", 0))
        family.add_metric(["guests"], guests * MIB)
        yield family


def _meminfo(path: Path) -> dict[str, int]:
    """`/proc/meminfo` in bytes, by field name."""
    fields: dict[str, int] = {}
    for line in path.read_text().splitlines():
        name, _, value = line.partition(":")
        parts = value.split()
        if parts and parts[0].isdigit():
            fields[name] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return fields
