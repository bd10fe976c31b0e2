"""Host resources without a sandbox that should hold them, as a list of findings.

A sandbox `running` or `paused` holds one QEMU process, one namespace (with its
tap), one run dir and one VMM cgroup; `suspended` holds none of those. Every
live sandbox holds its disk directory (and may hold snapshots); nothing else may
hold any. A mount other than the pool's, or a link of this server in the host
namespace, is an orphan too. Slots map to sandboxes through the node's records.
"""

from __future__ import annotations

from tests.e2e.server import SpaceServer

HOLDS_VM = frozenset({"running", "paused"})
LIVE = frozenset({"creating", "running", "paused", "suspending", "suspended", "restoring"})


def orphans(server: SpaceServer, states: dict[str, str]) -> list[str]:
    """What the host holds that `states` (sandbox id -> state) does not explain."""
    view = server.host_view()
    holding = {sandbox_id for sandbox_id, state in states.items() if state in HOLDS_VM}
    live = {sandbox_id for sandbox_id, state in states.items() if state in LIVE}

    def owner(slot: str) -> str:
        return view.owners.get(slot, f"?{slot}")

    found = [
        f"{len(pids)} QEMU processes of {owner(slot)}"
        for slot, pids in sorted(view.vmm_pids.items())
        if owner(slot) not in holding or len(pids) != 1
    ]
    for kind, slots in (("namespace", view.namespaces), ("run dir", view.run_dirs)):
        found += [f"{kind} of {owner(s)}" for s in sorted(slots) if owner(s) not in holding]
    found += [f"cgroup of {owner(s)}" for s in sorted(view.cgroups - set(view.vmm_pids))]
    found += [f"disk of {owner(s)}" for s in sorted(view.disk_dirs) if owner(s) not in live]
    found += [
        f"snapshot of {owner(slot)}"
        for slot in sorted(view.snapshots)
        if not slot.startswith("base") and owner(slot) not in live
    ]
    found += [f"mount {mount}" for mount in view.foreign_mounts]
    found += [f"host link {link}" for link in view.host_links]
    if view.pool_mounts != 1:
        found.append(f"{view.pool_mounts} pool mounts")
    return found
