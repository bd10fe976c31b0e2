"""The sandbox controller: drives rows toward their desired state through a node.

The API calls `ensure_created` / `ensure_deleted` / `power` for a fast answer;
the same code runs from `reconcile_once`, the periodic, level-triggered backstop
that converges desired and observed state after any crash (`plan.py` says how
each state goes on). At most one operation per sandbox is in flight, whoever
started it (API, expiry, reconciler); a second caller waits for the first, and
the reconciler leaves a sandbox alone while one is. A pass logs and skips an
action that fails (or a row it cannot use) and goes on with the rest.
A pass the database cuts short is simply retried next interval (the `Database`
logs the outage once); nothing is marked `error` for it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from functools import partial
from typing import TypeVar

from space import faults
from space.config.control import ControllerConfig
from space.config.server import TimeoutConfig
from space.control.builds import BuildLimits, Builds
from space.control.drain import Drain
from space.control.errors import NodeFailed
from space.control.expiry import Activity, Expiry
from space.control.leader import NotLeader
from space.control.plan import Action, RowSnapshot, Verb, plan
from space.control.power import PowerOp, apply_power, settle
from space.control.tasks import run_periodically
from space.seam.protocol import NodeClient
from space.seam.values import SandboxObservation, SandboxSpec, VolumeMount
from space.store.db import Database
from space.store.errors import DatabaseUnavailable, NotFound, StaleGeneration
from space.store.models import Sandbox, utcnow
from space.store.sandboxes import SandboxRepo, StillDue
from space.store.states import SandboxState
from space.tasks import TaskSet

log = logging.getLogger(__name__)
T = TypeVar("T")
AfterPass = Callable[[list[SandboxObservation]], Awaitable[None]]
BUILD_POLL_SECONDS = 0.5  # how often a running build's log is copied from its node
FORK_MOVED = "fork not made: another sandbox of the same fork moved on before it ran"


class Controller:
    def __init__(
        self,
        *,
        db: Database,
        node: NodeClient,
        timeouts: TimeoutConfig,
        config: ControllerConfig,
        builds: BuildLimits | None = None,
        activity: Activity | None = None,
        fence: Callable[[], None] | None = None,
        after_pass: AfterPass | None = None,
        others_act: bool = False,
        drains: bool = False,
    ) -> None:
        """`fence` raises `NotLeader` once this process may no longer act (a deposed
        leader, `space.control.leader`); it is checked before every create, destroy
        and state write. `after_pass` gets what the node observed at the end of
        every reconcile pass (the credential views' backstop). `others_act`: API processes
        beside this one run power operations themselves (`space controller`); the
        reconciler leaves one alone until it has outlasted its own timeout (`plan`).
        `drains`: move the sandboxes of draining nodes off them (`drain.py`; a node
        that is a cluster of many). `builds`: how template builds are scheduled."""
        self._db = db
        self._fence = fence or _unfenced
        self._after_pass = after_pass
        self._node = node
        self._timeouts = timeouts
        self._config = config
        self._grace = timeouts.create + timeouts.node_call if others_act else 0.0
        self._in_flight: dict[str, asyncio.Task[object]] = {}  # create, delete, destroy
        self._powering: dict[str, asyncio.Task[object]] = {}  # pause, resume, ...
        self._tasks = TaskSet()
        self.drain = Drain(db, node, self.power, self._fence) if drains else None
        self.builds = Builds(db, node, self._fence, timeout=timeouts.node_call, limits=builds)
        self.expiry = Expiry(
            db=db,
            node=node,
            activity=activity or Activity(),
            delete=self.ensure_deleted,
            power=self.power,
        )

    # -- entry points -----------------------------------------------------------

    async def ensure_created(self, sandbox_id: str) -> None:
        """Create the VM for a `creating` row; returns once the row has left `creating`."""
        await self._once(sandbox_id, lambda: self._create(sandbox_id))

    async def ensure_deleted(self, sandbox_id: str) -> None:
        """Destroy the VM of a `deleting` row and mark it `deleted`."""
        await self._once(sandbox_id, lambda: self._finish_delete(sandbox_id))

    async def ensure_forked(self, source_id: str, sandbox_ids: Sequence[str]) -> None:
        """Fork the running `source_id` into the `creating` rows `sandbox_ids` (one node
        call, one snapshot instant); returns once they have left `creating`. Runs as a
        power operation on the source (none other runs on it meanwhile) and as the
        operation in flight of every fork (the reconciler leaves them alone) from this
        call on, before it waits for its turn on the source."""
        fork = self._tasks.spawn(
            _call(lambda: self._fork_in_turn(source_id, sandbox_ids)), f"sandbox-fork-{source_id}"
        )
        for sandbox_id in sandbox_ids:
            self._in_flight[sandbox_id] = fork
            fork.add_done_callback(partial(_drop, self._in_flight, sandbox_id))
        outcome = await asyncio.shield(fork)
        if isinstance(outcome, DatabaseUnavailable):
            raise outcome

    async def power(self, sandbox: Sandbox, op: PowerOp, *, due: StillDue | None = None) -> Sandbox:
        """Pause, resume, suspend or restore; an expiry (`due`) is pinned to the
        generation of `sandbox`, a call re-reads the row once it has its turn."""
        pinned = sandbox.generation if due is not None else None
        return await self._once(
            sandbox.id, lambda: self._power(sandbox.id, op, pinned, due), power=True
        )

    async def reconcile_once(self) -> None:
        """One level-triggered pass over every live sandbox and every observed VM."""
        async with asyncio.timeout(self._timeouts.node_call):
            observed = await self._node.observe()
        with self._db.session() as session:
            now = utcnow()
            rows = [_snapshot(row, now) for row in SandboxRepo(session).list_live()]
        busy = frozenset(self._in_flight) | set(self._powering)
        actions = plan(rows, observed, busy=busy, grace=self._grace)
        for action in actions:
            log.info("reconcile: %s %s (%s)", action.verb, action.sandbox_id, action.reason)
            try:
                await self._apply(action)
            except DatabaseUnavailable:
                raise  # the rest would fail alike: the pass ends, the next one retries
            except Exception:
                log.exception("reconcile: %s %s failed", action.verb, action.sandbox_id)
        if self._after_pass is not None:
            await self._after_pass(observed)

    def start(self) -> None:
        """Run the reconciler and the expiry sweep in the background (first passes now)."""
        reconciler = run_periodically(
            "reconciler",
            _through_outages(self.reconcile_once),
            interval=self._config.reconcile_interval,
            backoff=self._config.restart_backoff,
        )
        expiry = run_periodically(
            "expiry",
            _through_outages(self.expiry.sweep),
            interval=self._config.expiry_interval,
            backoff=self._config.restart_backoff,
        )
        builds = run_periodically(
            "template-builds",
            _through_outages(self.builds.poll),
            interval=BUILD_POLL_SECONDS,
            backoff=self._config.restart_backoff,
        )
        self._tasks.spawn(reconciler, "space-reconciler")
        self._tasks.spawn(expiry, "space-expiry")
        self._tasks.spawn(builds, "space-template-builds")
        if self.drain is not None:
            drain = run_periodically(
                "drain",
                _through_outages(self.drain.once),
                interval=self._config.reconcile_interval,
                backoff=self._config.restart_backoff,
            )
            self._tasks.spawn(drain, "space-drain")

    async def aclose(self) -> None:
        await self._tasks.cancel_all()

    # -- actions ----------------------------------------------------------------

    async def _apply(self, action: Action) -> None:
        sandbox_id = action.sandbox_id
        if action.verb is Verb.CREATE:
            await self._once(sandbox_id, lambda: self._create(sandbox_id))
        elif action.verb is Verb.FINISH_DELETE:
            await self._once(sandbox_id, lambda: self._finish_delete(sandbox_id))
        elif action.verb is Verb.DESTROY:
            await self._once(sandbox_id, lambda: self._destroy(sandbox_id))
        elif action.verb is Verb.ADOPT:
            self._move(action, SandboxState.RUNNING)
        elif action.verb is Verb.SETTLE:
            assert action.to is not None and action.generation is not None
            self._settle(sandbox_id, action.generation, action.to, action.reason)
        elif action.verb is Verb.POWER:
            op, generation = action.op, action.generation
            assert op is not None and generation is not None
            await self._once(
                sandbox_id, lambda: self._power(sandbox_id, op, generation, None), power=True
            )
        elif action.verb is Verb.FAIL:
            self._move(action, SandboxState.ERROR)

    async def _once(
        self, sandbox_id: str, op: Callable[[], Awaitable[T]], *, power: bool = False
    ) -> T:
        """Run `op` once no other operation on this sandbox is in flight.

        Operations re-read the row and are idempotent, so a second `create` after
        the first one finished is a no-op. A power operation also waits for other
        power operations; a delete does not wait for them (it wins: theirs fail on
        the row it moved on). The operation runs as its own task: a caller that
        goes away (client disconnect) does not abort it half-way.
        """
        registry = self._powering if power else self._in_flight
        while (running := self._in_flight.get(sandbox_id) or registry.get(sandbox_id)) is not None:
            await asyncio.wait({running})
        task = self._tasks.spawn(_call(op), f"sandbox-op-{sandbox_id}")
        registry[sandbox_id] = task
        task.add_done_callback(lambda _t: registry.pop(sandbox_id, None))
        outcome = await asyncio.shield(task)
        if isinstance(outcome, DatabaseUnavailable):
            raise outcome  # cut by an outage: the next reconcile pass picks it up
        return outcome

    async def _power(
        self, sandbox_id: str, op: PowerOp, generation: int | None, due: StillDue | None
    ) -> Sandbox:
        with self._db.session() as session:
            row = SandboxRepo(session).get(sandbox_id)
        if generation is not None and row.generation != generation:
            raise StaleGeneration(sandbox_id, generation, row.generation)
        return await apply_power(
            self._db, self._node, row, op, timeout=self._timeouts.create, due=due
        )

    async def _create(self, sandbox_id: str) -> None:
        with faults.operation("create", sandbox_id):
            faults.point("after_commit")
            await self._create_now(sandbox_id)

    async def _create_now(self, sandbox_id: str) -> None:
        with self._db.session() as session:
            row = SandboxRepo(session).get(sandbox_id)
            if row.state != SandboxState.CREATING.value:
                return
            generation = row.generation
            spec = _spec(row)
        if isinstance(spec, str):
            self._transition(sandbox_id, generation, SandboxState.ERROR, spec)
            return
        try:
            async with asyncio.timeout(self._timeouts.create):
                await self._clear_leftover(sandbox_id)
                self._fence()
                observed = await self._node.create_sandbox(spec)
            if observed.state != "running":
                raise NodeFailed(_node_says(observed))
        except NotLeader:
            raise
        except Exception as exc:
            reason = f"create failed: {_describe(exc)}"
            log.warning("sandbox %s: %s", sandbox_id, reason)
            self._transition(sandbox_id, generation, SandboxState.ERROR, reason)
            return
        self._transition(sandbox_id, generation, SandboxState.RUNNING, None)

    async def _fork_in_turn(self, source_id: str, sandbox_ids: Sequence[str]) -> None:
        await self._once(source_id, lambda: self._fork(source_id, sandbox_ids), power=True)

    async def _fork(self, source_id: str, sandbox_ids: Sequence[str]) -> None:
        with faults.operation("fork", source_id):
            faults.point("after_commit")
            await self._fork_now(source_id, sandbox_ids)

    async def _fork_now(self, source_id: str, sandbox_ids: Sequence[str]) -> None:
        with self._db.session() as session:
            repo = SandboxRepo(session)
            rows = [repo.get(sandbox_id) for sandbox_id in sandbox_ids]
            pinned = {r.id: r.generation for r in rows if r.state == SandboxState.CREATING.value}
        if len(pinned) != len(sandbox_ids):  # one moved on meanwhile (deleted, say)
            for sandbox_id, generation in pinned.items():
                self._transition(sandbox_id, generation, SandboxState.ERROR, FORK_MOVED)
            return
        try:
            async with asyncio.timeout(self._timeouts.create):
                self._fence()
                observed = await self._node.fork_sandbox(source_id, list(sandbox_ids))
            if failed := [o for o in observed if o.state != "running"]:
                raise NodeFailed(_node_says(failed[0]))
        except NotLeader:
            raise
        except Exception as exc:
            reason = f"fork of {source_id} failed: {_describe(exc)}"
            log.warning("%s", reason)
            for sandbox_id, generation in pinned.items():
                self._transition(sandbox_id, generation, SandboxState.ERROR, reason)
            return
        for sandbox_id, generation in pinned.items():
            self._transition(sandbox_id, generation, SandboxState.RUNNING, None)

    async def _clear_leftover(self, sandbox_id: str) -> None:
        """A create interrupted by a crash can leave the node holding the sandbox with
        no live VM (`stopped`, `error`); remove that so the create starts clean."""
        for obs in await self._node.observe():
            if obs.sandbox_id == sandbox_id and obs.state in ("stopped", "error"):
                log.info("sandbox %s: removing the node's %s leftover", sandbox_id, obs.state)
                await self._node.destroy_sandbox(sandbox_id)

    async def _finish_delete(self, sandbox_id: str) -> None:
        with self._db.session() as session:
            row = SandboxRepo(session).get(sandbox_id)
            if row.state != SandboxState.DELETING.value:
                return
            generation = row.generation
        with faults.operation("delete", sandbox_id):
            faults.point("after_commit")
            await self._destroy(sandbox_id)
        self._transition(sandbox_id, generation, SandboxState.DELETED, None)

    async def _destroy(self, sandbox_id: str) -> None:
        self._fence()
        async with asyncio.timeout(self._timeouts.node_call):
            await self._node.destroy_sandbox(sandbox_id)

    def _settle(
        self, sandbox_id: str, generation: int, to: SandboxState, reason: str | None
    ) -> None:
        self._fence()
        try:
            settle(self._db, sandbox_id, generation, to, reason)
        except (StaleGeneration, NotFound) as exc:
            log.info("sandbox %s changed meanwhile, skipping %s: %s", sandbox_id, to, exc)

    def _move(self, action: Action, to: SandboxState) -> None:
        assert action.generation is not None
        self._transition(action.sandbox_id, action.generation, to, action.reason)

    def _transition(
        self, sandbox_id: str, generation: int, to: SandboxState, reason: str | None
    ) -> None:
        """Apply a transition pinned to `generation`; a row that moved on is left alone."""
        self._fence()
        try:
            with self._db.session() as session:
                SandboxRepo(session).transition(
                    sandbox_id, expected_generation=generation, to=to, reason=reason
                )
        except (StaleGeneration, NotFound) as exc:
            log.info("sandbox %s changed meanwhile, skipping %s: %s", sandbox_id, to, exc)


def _drop(registry: dict[str, asyncio.Task[object]], sandbox_id: str, _: object) -> None:
    registry.pop(sandbox_id, None)


def _unfenced() -> None:
    """A controller that is the only one (`space up`, SQLite) may always act."""


async def _call(op: Callable[[], Awaitable[T]]) -> T | DatabaseUnavailable:
    """Run `op`; an outage that cut it short is returned for the caller to raise
    (the next reconcile pass picks the sandbox up), not logged as a task failure."""
    try:
        return await op()
    except DatabaseUnavailable as exc:
        return exc


def _through_outages(step: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
    """`step`, ending quietly when the database is down (next interval tries again)."""

    async def run() -> None:
        try:
            await step()
        except DatabaseUnavailable:
            pass

    return run


def _spec(row: Sandbox) -> SandboxSpec | str:
    """What the node is asked to create, or why the row cannot say (a corrupt row)."""
    try:
        return SandboxSpec(
            sandbox_id=row.id,
            template=row.template,
            env=dict(row.env),
            network=dict(row.network) if row.network is not None else None,
            volumes=tuple(VolumeMount(**mount) for mount in row.volumes or ()),
        )
    except (ValueError, TypeError) as exc:
        return f"create failed: the sandbox row is unusable: {exc}"


def _snapshot(row: Sandbox, now: datetime) -> RowSnapshot:
    return RowSnapshot(
        sandbox_id=row.id,
        state=row.state,
        generation=row.generation,
        desired=row.desired_state,
        fork_of=row.fork_of,
        age=(now - row.updated_at).total_seconds(),
        reason=row.reason,
    )


def _node_says(obs: SandboxObservation) -> str:
    return f"the node reports state {obs.state}: {obs.reason or 'no reason given'}"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out waiting for the node"
    if isinstance(exc, NodeFailed):
        return exc.reason
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
