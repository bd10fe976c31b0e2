"""`Cluster`: one `NodeClient` over every node of the registry.

The control plane (the `/v1` and E2B fronts, the controller) talks to a `Cluster`
exactly as it talks to one node. `create_sandbox` places the sandbox
(`space.control.placement.choose`), records the node in `sandboxes.node` before it
asks that node, and a retried create (after a crash) goes back to the same node
unless that node is lost. Every call naming a sandbox goes to the node its row names.

`observe` asks every member at once, each bounded by `call_timeout`:

- a node that answers reports its own sandboxes; one it holds that the database
  places elsewhere (a create that was placed again after its node was lost, say) is a
  stray and destroyed there, never reported;
- for a node that does not answer, its sandboxes are reported `unreachable`: the
  reconciler leaves them alone until the node answers again or is lost;
- for a node the registry marks lost (`space.control.registry`), its running and
  paused sandboxes are reported `lost` naming the node, so the reconciler marks them
  failed with that reason (`control.plan.lost_with`), and back to what the node holds
  if it returns (a killed node's VMs run on, and it adopts them when it restarts); a
  create placed there is placed again; a delete finishes without it (there is
  nothing left to ask). Its suspended (and restoring) sandboxes are reported
  `suspended`: with a shared snapshot store they restore elsewhere.

Moving a suspended sandbox (`adopt_snapshot`, which `restore_sandbox` does first
for a sandbox whose node is lost or gone): a new node is chosen as for a create
(never the one it leaves), recorded in `sandboxes.node`, then asked to take the
sandbox in from the shared snapshot store (`space.node.moving`); if it cannot, the
row names the node it left again. A node the row names that does not hold the
sandbox (a move cut short between the two) is asked to take it in before it
restores it.

Members are built by `connect(node)` from the registry (`refresh`, at most every
`refresh_seconds`): a node that registers joins, one whose address changes is
connected again, one that leaves the registry is closed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy.orm import Session

from space.control.placement import NoNodeAvailable, choose
from space.control.plan import lost_with
from space.seam.errors import SandboxNotFound, SandboxUnavailable
from space.seam.protocol import CommandHandle, NodeClient, WatchStream
from space.seam.values import (
    AuditBatch,
    BuildSpec,
    BuildStatus,
    CommandEnd,
    CredentialGrant,
    EgressRecord,
    ExecRequest,
    ExecResult,
    FileInfo,
    ProcessInfo,
    Record,
    SandboxObservation,
    SandboxSpec,
    TemplateUsage,
    WarmPoolStats,
)
from space.store.db import Database
from space.store.models import Sandbox
from space.store.nodes import NodeInfo, NodeRepo, NodeState
from space.store.placements import PlacementRepo
from space.store.states import SandboxState
from space.store.templates import TemplateRepo
from space.store.volumes import VolumeRepo

log = logging.getLogger(__name__)

S = SandboxState

#: Row states whose sandbox a lost node took with it (reported `lost`).
TAKEN_BY_LOSS = frozenset({S.RUNNING.value, S.PAUSED.value, S.SUSPENDING.value})
#: Row states whose sandbox a lost node left in the shared snapshot store.
LEFT_BY_LOSS = frozenset({S.SUSPENDED.value, S.RESTORING.value})


class MemberNode(NodeClient, Protocol):
    """A node the cluster opens when it joins and closes when it leaves (`RemoteNode`)."""

    async def open(self) -> None: ...

    async def aclose(self) -> None: ...


@dataclass
class Member:
    info: NodeInfo
    client: MemberNode


@dataclass(frozen=True)
class _Row:
    node: str | None
    state: str
    template: str


class Cluster:
    def __init__(
        self,
        db: Database,
        connect: Callable[[NodeInfo], MemberNode],
        *,
        call_timeout: float,
        refresh_seconds: float = 5.0,
    ) -> None:
        self._db = db
        self._connect = connect
        self._call_timeout = call_timeout
        self._refresh_seconds = refresh_seconds
        self._members: dict[str, Member] = {}
        self._nodes: dict[str, NodeInfo] = {}
        self._refreshed = -float("inf")
        self._lock = asyncio.Lock()

    # -- membership ------------------------------------------------------------------

    async def open(self) -> None:
        await self.refresh(force=True)

    async def aclose(self) -> None:
        members, self._members = list(self._members.values()), {}
        for member in members:
            await member.client.aclose()

    def members(self) -> Mapping[str, NodeClient]:
        return {name: member.client for name, member in self._members.items()}

    async def refresh(self, *, force: bool = False) -> None:
        """Bring the members in line with the registry (at most every
        `refresh_seconds` unless `force`)."""
        async with self._lock:
            if not force and time.monotonic() - self._refreshed < self._refresh_seconds:
                return
            nodes = await asyncio.to_thread(self._read_registry)
            self._nodes = {node.name: node for node in nodes}
            for name in [n for n in self._members if n not in self._nodes]:
                await self._members.pop(name).client.aclose()
            for node in nodes:
                try:
                    await self._join(node)
                except Exception as exc:  # one node that cannot join never stops the rest
                    log.error("node %s cannot join the cluster: %s", node.name, exc)
            self._refreshed = time.monotonic()

    async def _join(self, node: NodeInfo) -> None:
        member = self._members.get(node.name)
        if member is not None and member.info.address == node.address:
            member.info = node
            return
        if member is not None:
            await member.client.aclose()
        client = self._connect(node)
        await client.open()
        self._members[node.name] = Member(node, client)

    def _read_registry(self) -> list[NodeInfo]:
        with self._db.session() as session:
            return NodeRepo(session).all()

    # -- placement and routing -------------------------------------------------------

    async def create_sandbox(self, spec: SandboxSpec) -> SandboxObservation:
        await self.refresh()
        name = await asyncio.to_thread(self._place, spec)
        return await self._members[name].client.create_sandbox(spec)

    def _place(self, spec: SandboxSpec) -> str:
        """The node `spec` is created on: its recorded one, unless that node is lost
        or gone; otherwise a new choice over the registry as it is now (a node lost
        since the last refresh is not chosen; the node of its volumes if it mounts
        any), recorded before any node is asked."""
        with self._db.session() as session:
            placements = PlacementRepo(session)
            nodes = [n for n in NodeRepo(session).all() if n.name in self._members]
            placed = placements.node_of(spec.sandbox_id)
            if any(n.name == placed and n.state is not NodeState.LOST for n in nodes):
                assert placed is not None
                return placed
            if spec.volumes:
                chosen = _volumes_node(session, spec, nodes)
            else:
                chosen = choose(nodes, spec.template, placements.load()).name
            placements.place(spec.sandbox_id, chosen)
        log.info("sandbox %s placed on node %s", spec.sandbox_id, chosen)
        return chosen

    def _on(self, sandbox_id: str) -> NodeClient:
        return self._member_of(sandbox_id).client

    # -- template builds -------------------------------------------------------------

    async def start_build(self, build_id: str, spec: BuildSpec) -> None:
        """On its recorded node, else on a ready one chosen as for a create (recorded
        first); the template it makes lives on that node."""
        await self.refresh()
        name = await asyncio.to_thread(self._place_build, build_id)
        await self._members[name].client.start_build(build_id, spec)

    def _place_build(self, build_id: str) -> str:
        with self._db.session() as session:
            builds = TemplateRepo(session)
            placed = builds.get(build_id).node
            if placed is not None and placed in self._members:
                return placed
            chosen = self._least_loaded(session)
            builds.place(build_id, chosen)
            return chosen

    def _least_loaded(self, session: Session) -> str:
        """The ready member a new build or volume goes to, as for a create of `base`."""
        nodes = [n for n in NodeRepo(session).all() if n.name in self._members]
        return choose(nodes, "base", PlacementRepo(session).load()).name

    async def build_status(self, build_id: str, after: int) -> BuildStatus:
        """`unknown` when its node is lost or gone: the build went with it."""
        member = self._build_member(build_id)
        if member is None:
            return BuildStatus("unknown")
        return await member.client.build_status(build_id, after)

    async def cancel_build(self, build_id: str, after: int) -> BuildStatus:
        """On its node; `unknown` when that is lost or gone (the build went with it)."""
        member = self._build_member(build_id)
        if member is None:
            return BuildStatus("unknown")
        return await member.client.cancel_build(build_id, after)

    def _build_member(self, build_id: str) -> Member | None:
        """The member a build runs on, unless it is lost (or gone, or never placed)."""
        with self._db.session() as session:
            name = TemplateRepo(session).get(build_id).node
        member = self._members.get(name) if name is not None else None
        if member is None or member.info.state is NodeState.LOST:
            return None
        return member

    async def snapshot_template(self, sandbox_id: str, name: str) -> str:
        """On the sandbox's node, where the template then lives."""
        return await self._on(sandbox_id).snapshot_template(sandbox_id, name)

    async def delete_template(self, name: str) -> None:
        """On every member that answers (a template lives where it was built)."""
        for member in list(self._members.values()):
            if member.info.state is not NodeState.LOST:
                await self._quietly(member.client.delete_template(name))

    async def template_usage(self, names: list[str]) -> TemplateUsage:
        """Summed over the members that answer (each holds what was built there)."""
        live = [m for m in self._members.values() if m.info.state is not NodeState.LOST]
        answers = await asyncio.gather(*(self._quiet_usage(m, names) for m in live))
        return TemplateUsage(sum(a.versions for a in answers), sum(a.bytes for a in answers))

    async def _quiet_usage(self, member: Member, names: list[str]) -> TemplateUsage:
        try:
            async with asyncio.timeout(self._call_timeout):
                return await member.client.template_usage(names)
        except Exception as exc:
            log.warning("node %s: template usage: %s", member.info.name, exc)
            return TemplateUsage()

    # -- volumes -------------------------------------------------------------------

    async def create_volume(self, volume_id: str, size_mb: int) -> None:
        """Make it on its recorded node, else on the least loaded ready one (recorded
        first)."""
        await self.refresh()
        name = await asyncio.to_thread(self._place_volume, volume_id)
        await self._members[name].client.create_volume(volume_id, size_mb)

    def _place_volume(self, volume_id: str) -> str:
        with self._db.session() as session:
            volumes = VolumeRepo(session)
            placed = volumes.node_of(volume_id)
            if placed is not None and placed in self._members:
                return placed
            chosen = self._least_loaded(session)
            volumes.place(volume_id, chosen)
            return chosen

    async def delete_volume(self, volume_id: str) -> None:
        member = await asyncio.to_thread(self._volume_member, volume_id)
        if member is not None:
            await member.client.delete_volume(volume_id)

    async def clone_volume(self, source_id: str, volume_id: str) -> None:
        """A clone lives on its source's node, recorded there before it is made."""
        member = await asyncio.to_thread(self._volume_member, source_id)
        if member is None:
            raise FileNotFoundError(2, "the volume's node is not in the cluster", source_id)
        with self._db.session() as session:
            VolumeRepo(session).place(volume_id, member.info.name)
        await member.client.clone_volume(source_id, volume_id)

    def _volume_member(self, volume_id: str) -> Member | None:
        """The member holding `volume_id`, None if it was never placed (SandboxUnavailable
        while its node is lost)."""
        with self._db.session() as session:
            name = VolumeRepo(session).node_of(volume_id)
        if name is None:
            return None
        member = self._members.get(name)
        if member is None or member.info.state is NodeState.LOST:
            raise SandboxUnavailable(volume_id, "unreachable", f"its node {name} is lost")
        return member

    async def adopt_snapshot(self, sandbox_id: str) -> SandboxObservation:
        """Move the suspended `sandbox_id` to another node (NoNodeAvailable if none
        can take it, SnapshotMissing if the shared store has none)."""
        await self.refresh()
        name, leaving = await asyncio.to_thread(self._place_elsewhere, sandbox_id)
        log.info("sandbox %s moves from node %s to node %s", sandbox_id, leaving, name)
        try:
            return await self._members[name].client.adopt_snapshot(sandbox_id)
        except Exception:
            if leaving is not None:  # it stays where its snapshot may still be
                await asyncio.to_thread(self._place_all, [sandbox_id], leaving)
            raise

    def _place_elsewhere(self, sandbox_id: str) -> tuple[str, str | None]:
        """A new node for `sandbox_id`, recorded; and the one it leaves."""
        with self._db.session() as session:
            placements = PlacementRepo(session)
            row = session.get(Sandbox, sandbox_id)
            if row is None:
                raise SandboxNotFound(sandbox_id)
            leaving = row.node
            nodes = [
                n for n in NodeRepo(session).all() if n.name in self._members and n.name != leaving
            ]
            if not nodes:
                raise NoNodeAvailable(row.template, f"no node but {leaving} is registered")
            chosen = choose(nodes, row.template, placements.load()).name
            placements.place(sandbox_id, chosen)
            return chosen, leaving

    def _held_elsewhere(self, sandbox_id: str) -> bool:
        """Whether `sandbox_id`'s node is lost or gone from the registry, as the
        registry is now (not as this process last read it)."""
        with self._db.session() as session:
            name = PlacementRepo(session).node_of(sandbox_id)
            if name is None:
                return False
            states = {node.name: node.state for node in NodeRepo(session).all()}
        return states.get(name, NodeState.LOST) is NodeState.LOST

    def _member_of(self, sandbox_id: str) -> Member:
        """The member holding `sandbox_id` (SandboxUnavailable while its node is lost
        or unknown; SandboxNotFound when no node holds it)."""
        with self._db.session() as session:
            name = PlacementRepo(session).node_of(sandbox_id)
        if name is None:
            if len(self._members) == 1:  # made before placement existed, by the one node
                return next(iter(self._members.values()))
            raise SandboxNotFound(sandbox_id)
        member = self._members.get(name)
        if member is None or member.info.state is NodeState.LOST:
            raise SandboxUnavailable(sandbox_id, "unreachable", f"its node {name} is lost")
        return member

    async def fork_sandbox(
        self, source_id: str, sandbox_ids: Sequence[str]
    ) -> list[SandboxObservation]:
        """Forks live where their source's memory is: on its node, placed there first."""
        member = self._member_of(source_id)
        await asyncio.to_thread(self._place_all, sandbox_ids, member.info.name)
        return await member.client.fork_sandbox(source_id, sandbox_ids)

    def _place_all(self, sandbox_ids: Sequence[str], node: str) -> None:
        with self._db.session() as session:
            placements = PlacementRepo(session)
            for sandbox_id in sandbox_ids:
                placements.place(sandbox_id, node)

    # -- observation -----------------------------------------------------------------

    async def observe(self) -> list[SandboxObservation]:
        await self.refresh()
        rows = await asyncio.to_thread(self._live_rows)
        live = [m for m in self._members.values() if m.info.state is not NodeState.LOST]
        answers = await asyncio.gather(*(self._observe(m) for m in live))
        observed: list[SandboxObservation] = []
        silent: set[str] = set()
        for member, answer in zip(live, answers, strict=True):
            if answer is None:
                silent.add(member.info.name)
                continue
            observed += await self._own(member, answer, rows)
        return observed + self._absent(rows, silent)

    async def _observe(self, member: Member) -> list[SandboxObservation] | None:
        try:
            async with asyncio.timeout(self._call_timeout):
                return await member.client.observe()
        except Exception as exc:  # one silent node never stops the pass
            log.warning("node %s does not answer: %s", member.info.name, exc)
            return None

    async def _own(
        self, member: Member, answer: list[SandboxObservation], rows: dict[str, _Row]
    ) -> list[SandboxObservation]:
        """`answer` less the strays: sandboxes the database places on another node."""
        name = member.info.name
        own = []
        for obs in answer:
            row = rows.get(obs.sandbox_id)
            if row is not None and row.node is not None and row.node != name:
                log.info(
                    "node %s: destroying stray %s (placed on %s)", name, obs.sandbox_id, row.node
                )
                await self._quietly(member.client.destroy_sandbox(obs.sandbox_id))
                continue
            own.append(obs)
        return own

    def _absent(self, rows: dict[str, _Row], silent: set[str]) -> list[SandboxObservation]:
        """Observations for the sandboxes of silent and lost nodes."""
        result = []
        for sandbox_id, row in rows.items():
            if row.node is None or row.node not in self._nodes:
                continue
            if row.node in silent:
                why = f"node {row.node} does not answer"
                result.append(SandboxObservation(sandbox_id, "unreachable", row.template, why))
            elif self._nodes[row.node].state is not NodeState.LOST:
                continue
            elif row.state in TAKEN_BY_LOSS:
                why = lost_with(row.node)
                result.append(SandboxObservation(sandbox_id, "lost", row.template, why))
            elif row.state in LEFT_BY_LOSS:
                why = f"node {row.node} is lost; restores on another node from the shared store"
                result.append(SandboxObservation(sandbox_id, "suspended", row.template, why))
        return result

    def _live_rows(self) -> dict[str, _Row]:
        with self._db.session() as session:
            query = session.query(Sandbox.id, Sandbox.node, Sandbox.state, Sandbox.template)
            query = query.filter(Sandbox.state != S.DELETED.value)
            return {sid: _Row(node, state, template) for sid, node, state, template in query}

    async def _quietly(self, call: Awaitable[Any]) -> None:
        try:
            async with asyncio.timeout(self._call_timeout):
                await call
        except Exception as exc:
            log.warning("cluster: %s", exc)

    # -- node-wide calls -------------------------------------------------------------

    async def templates(self) -> list[str]:
        answers = await asyncio.gather(*(self._quiet_templates(m) for m in self._members.values()))
        return sorted({name for names in answers for name in names})

    async def _quiet_templates(self, member: Member) -> list[str]:
        try:
            async with asyncio.timeout(self._call_timeout):
                return await member.client.templates()
        except Exception as exc:
            log.warning("node %s: templates: %s", member.info.name, exc)
            return []

    def warm_pool_stats(self) -> list[WarmPoolStats]:
        return [stats for m in self._members.values() for stats in m.client.warm_pool_stats()]

    async def credential_audit(self, after: int, limit: int) -> AuditBatch:
        """Each node keeps a chain of its own: `AuditCopy` copies them member by member
        (`members()`); asked as one node, a cluster holds none."""
        return AuditBatch(source="cluster", head=0)

    # -- calls on one sandbox --------------------------------------------------------

    async def destroy_sandbox(self, sandbox_id: str) -> None:
        """On the sandbox's node; nothing while that node is lost or gone (as the registry
        says now: a returning node's leftover is an orphan the reconciler removes). A
        node this process last saw lost but the registry has back is asked again."""
        if await asyncio.to_thread(self._held_elsewhere, sandbox_id):
            return
        try:
            node = self._on(sandbox_id)
        except SandboxUnavailable:
            await self.refresh(force=True)  # it came back since this process last looked
            node = self._on(sandbox_id)
        await node.destroy_sandbox(sandbox_id)

    async def exec(
        self, sandbox_id: str, request: ExecRequest, command_id: str | None = None
    ) -> ExecResult:
        return await self._on(sandbox_id).exec(sandbox_id, request, command_id)

    async def start_command(
        self, sandbox_id: str, request: ExecRequest, command_id: str | None = None
    ) -> CommandHandle:
        return await self._on(sandbox_id).start_command(sandbox_id, request, command_id)

    def command_events(
        self, sandbox_id: str, command_id: str, after: int, keepalive: float
    ) -> AsyncIterator[Record | None]:
        return self._on(sandbox_id).command_events(sandbox_id, command_id, after, keepalive)

    async def command_input(self, sandbox_id: str, command_id: str, data: bytes, eof: bool) -> None:
        await self._on(sandbox_id).command_input(sandbox_id, command_id, data, eof)

    async def command_signal(self, sandbox_id: str, command_id: str, signum: int) -> None:
        await self._on(sandbox_id).command_signal(sandbox_id, command_id, signum)

    async def command_resize(self, sandbox_id: str, command_id: str, rows: int, cols: int) -> None:
        await self._on(sandbox_id).command_resize(sandbox_id, command_id, rows, cols)

    async def command_ends(self, sandbox_id: str, command_ids: list[str]) -> list[CommandEnd]:
        return await self._on(sandbox_id).command_ends(sandbox_id, command_ids)

    def read_file(self, sandbox_id: str, path: str) -> AsyncIterator[bytes]:
        return self._on(sandbox_id).read_file(sandbox_id, path)

    async def write_file(self, sandbox_id: str, path: str, chunks: AsyncIterable[bytes]) -> int:
        return await self._on(sandbox_id).write_file(sandbox_id, path, chunks)

    async def pause_sandbox(self, sandbox_id: str) -> None:
        await self._on(sandbox_id).pause_sandbox(sandbox_id)

    async def resume_sandbox(self, sandbox_id: str) -> None:
        await self._on(sandbox_id).resume_sandbox(sandbox_id)

    async def suspend_sandbox(self, sandbox_id: str) -> None:
        await self._on(sandbox_id).suspend_sandbox(sandbox_id)

    async def restore_sandbox(self, sandbox_id: str) -> None:
        """Restore where the row places it: moved first off a lost or gone node, taken
        in from the shared store by a placed node that does not hold it yet."""
        if await asyncio.to_thread(self._held_elsewhere, sandbox_id):
            await self.adopt_snapshot(sandbox_id)
        node = self._on(sandbox_id)
        try:
            await node.restore_sandbox(sandbox_id)
        except SandboxNotFound:
            await node.adopt_snapshot(sandbox_id)
            await node.restore_sandbox(sandbox_id)

    async def set_network_policy(self, sandbox_id: str, policy: dict[str, Any] | None) -> None:
        await self._on(sandbox_id).set_network_policy(sandbox_id, policy)

    async def set_credentials(self, sandbox_id: str, grant: CredentialGrant) -> None:
        await self._on(sandbox_id).set_credentials(sandbox_id, grant)

    async def egress_audit(self, sandbox_id: str, limit: int) -> list[EgressRecord]:
        return await self._on(sandbox_id).egress_audit(sandbox_id, limit)

    async def open_port(
        self, sandbox_id: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await self._on(sandbox_id).open_port(sandbox_id, port)

    async def stat(self, sandbox_id: str, path: str) -> FileInfo:
        return await self._on(sandbox_id).stat(sandbox_id, path)

    async def list_dir(self, sandbox_id: str, path: str, depth: int = 1) -> list[FileInfo]:
        return await self._on(sandbox_id).list_dir(sandbox_id, path, depth)

    async def make_dir(self, sandbox_id: str, path: str) -> bool:
        return await self._on(sandbox_id).make_dir(sandbox_id, path)

    async def move(self, sandbox_id: str, src: str, dst: str) -> None:
        await self._on(sandbox_id).move(sandbox_id, src, dst)

    async def remove(self, sandbox_id: str, path: str) -> None:
        await self._on(sandbox_id).remove(sandbox_id, path)

    def watch(self, sandbox_id: str, path: str, recursive: bool = False) -> WatchStream:
        return self._on(sandbox_id).watch(sandbox_id, path, recursive)

    async def start_process(
        self,
        sandbox_id: str,
        request: ExecRequest,
        *,
        user: str | None,
        stdin_pipe: bool,
        command_id: str | None = None,
    ) -> CommandHandle:
        node = self._on(sandbox_id)
        return await node.start_process(
            sandbox_id, request, user=user, stdin_pipe=stdin_pipe, command_id=command_id
        )

    async def processes(self, sandbox_id: str) -> list[ProcessInfo]:
        return await self._on(sandbox_id).processes(sandbox_id)

    async def attach(self, sandbox_id: str, pid: int) -> CommandHandle:
        return await self._on(sandbox_id).attach(sandbox_id, pid)


def _volumes_node(session: Session, spec: SandboxSpec, nodes: Sequence[NodeInfo]) -> str:
    """The node every volume of `spec` lives on (NoNodeAvailable if they are apart or
    their node cannot take a sandbox now)."""
    volumes = VolumeRepo(session)
    homes = {volumes.node_of(mount.volume_id) for mount in spec.volumes}
    if len(homes) != 1 or None in homes:
        raise NoNodeAvailable(spec.template, "its volumes are not all on one node")
    (home,) = homes
    ready = [n for n in nodes if n.name == home and n.state is NodeState.READY]
    if not ready:
        raise NoNodeAvailable(spec.template, f"its volumes' node {home} is not ready")
    return ready[0].name
