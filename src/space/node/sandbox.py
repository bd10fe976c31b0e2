"""One sandbox on this node: its VM, its agent connection, and what it was last seen doing."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import EllipsisType

from space.node import states
from space.node.agent import AgentClient, calls
from space.node.agent.calls import AgentCall
from space.node.records import SandboxRecord
from space.node.vmm.base import VmHandle
from space.node.vmm.console import follow_console
from space.seam.errors import SandboxUnavailable
from space.seam.values import ObservedState, SandboxObservation
from space.tasks import spawn

log = logging.getLogger(__name__)


@dataclass
class Sandbox:
    record: SandboxRecord
    vm: VmHandle | None = None
    agent: AgentClient | None = None
    _state: ObservedState = "creating"
    reason: str | None = None
    stopping: bool = False
    handshake: asyncio.Task[None] | None = field(default=None, repr=False)
    _watcher: asyncio.Task[None] | None = field(default=None, repr=False)
    _console: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def sandbox_id(self) -> str:
        return self.record.sandbox_id

    @property
    def state(self) -> ObservedState:
        """What the node last saw it doing; changed only by `become`."""
        return self._state

    def become(self, state: ObservedState, reason: str | None | EllipsisType = ...) -> None:
        """Move to `state`, checked against `node/states.py` (`NodeStateError` if the
        table has no such move), and to `reason` when one is given."""
        states.check(self.sandbox_id or self.record.slot, self._state, state)
        self._state = state
        if not isinstance(reason, EllipsisType):
            self.reason = reason

    def observation(self) -> SandboxObservation:
        return SandboxObservation(self.sandbox_id, self.state, self.record.template, self.reason)

    def watch(self, vm: VmHandle) -> None:
        """Notice the VMM ending on its own (crash, kill, guest power-off), and keep
        its serial console in a capped log."""
        self.vm = vm
        self.stopping = False
        self._watcher = spawn(self._watch_vm(vm), name=f"watch-vm-{self.sandbox_id}")
        config = vm.config
        self._console = spawn(
            follow_console(config.console_socket, config.console_log, config.console_log_bytes),
            name=f"console-{self.sandbox_id or self.record.slot}",
        )

    async def _watch_vm(self, vm: VmHandle) -> None:
        status = await vm.wait()
        if self.stopping:
            return
        self.become("error", f"VMM process {vm.pid} exited unexpectedly ({_describe(status)})")
        log.error("sandbox %s: %s", self.sandbox_id, self.reason)
        if self.agent is not None:
            await self.agent.close()

    async def settled(self, timeout: float) -> None:
        """Wait up to `timeout` for an agent handshake in progress (a VM adopted at
        startup, a warm VM's personalisation after its claim), so a request racing it
        is served after it instead of refused or sent before it; one still in progress
        then is `SandboxUnavailable` (nothing is sent to a guest before its handshake)."""
        task = self.handshake
        if task is not None and not task.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(task), timeout)
            if not task.done():
                why = f"its agent handshake is still in progress after {timeout:g} s"
                raise SandboxUnavailable(self.sandbox_id, self.state, why)

    def personalise_behind(self, timeout: float) -> None:
        """Personalise as this sandbox's handshake, in the background: calls into it
        wait for it (`settled`); if it fails or outlasts `timeout`, the sandbox is
        `error` (the controller then fails its row)."""

        async def run() -> None:
            try:
                async with asyncio.timeout(timeout):
                    await self.personalise()
            except Exception as exc:
                if not self.stopping:
                    self.become("error", f"personalisation failed: {exc!r}")
                    log.error("sandbox %s: %s", self.sandbox_id, self.reason)

        self.handshake = spawn(run(), name=f"personalise-{self.sandbox_id}")

    async def connect_agent(self, timeout: float) -> AgentClient:
        assert self.vm is not None
        self.agent = await AgentClient.connect(self.vm.config.agent_socket, timeout=timeout)
        return self.agent

    async def personalise(self, then: Sequence[AgentCall] = ()) -> None:
        """Fresh clock, entropy and identity (with the sandbox's env), so clones share no
        randomness or names; `then` (e.g. the gateway CA's files) in the same batch."""
        assert self.agent is not None
        name = self.sandbox_id or self.record.slot
        await self.agent.batch(
            [
                calls.set_clock(time.time_ns()),
                calls.reseed(os.urandom(64)),
                calls.set_identity(name, name, self.record.env),
                *then,
            ]
        )

    async def close(self) -> None:
        self.stopping = True
        for task in (self._watcher, self._console):
            if task is not None:
                task.cancel()
        if self.agent is not None:
            await self.agent.close()
            self.agent = None


def _describe(status: int) -> str:
    if status < 0 and status != -1:
        return f"killed by signal {-status}"
    if status == -1:
        return "status unknown"
    return f"exit status {status}"
