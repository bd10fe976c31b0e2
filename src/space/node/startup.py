"""A template's start command, run in its base VM before the base snapshot is taken.

`start_cmd` runs detached in a session of its own (`setsid`, output to `START_LOG`),
so it outlives the exec that launched it and is part of the snapshot every sandbox
of the template restores. `ready_cmd` is then run until it exits 0, for at most
`READY_SECONDS`; a start that never gets ready fails the base build with the tail of
its log, and no snapshot is taken.
"""

from __future__ import annotations

import asyncio
import shlex

from space.node.agent import AgentClient
from space.node.templates import TemplateSpec
from space.seam.errors import BootFailed
from space.seam.values import ExecRequest

START_LOG = "/var/log/space-start.log"
READY_SECONDS = 600.0
_POLL_SECONDS = 0.5
_EXEC_SECONDS = 60.0


async def start_template(agent: AgentClient, slot: str, spec: TemplateSpec) -> None:
    """Launch `spec.start_cmd` and wait for `spec.ready_cmd` (nothing if it has none)."""
    if spec.start_cmd is None:
        return
    launch = f"setsid sh -c {shlex.quote(spec.start_cmd)} </dev/null >{START_LOG} 2>&1 &"
    started = await agent.exec(ExecRequest(cmd=launch, cwd="/", timeout=_EXEC_SECONDS))
    if started.exit_code != 0:
        raise BootFailed(slot, f"template {spec.name}: start_cmd did not launch", await _log(agent))
    if spec.ready_cmd is None:
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + READY_SECONDS
    probe = ExecRequest(cmd=spec.ready_cmd, cwd="/", timeout=_EXEC_SECONDS)
    while (await agent.exec(probe)).exit_code != 0:
        if loop.time() > deadline:
            why = f"template {spec.name}: ready_cmd failed for {READY_SECONDS:.0f} s"
            raise BootFailed(slot, why, await _log(agent))
        await asyncio.sleep(_POLL_SECONDS)


async def _log(agent: AgentClient) -> str:
    tail = await agent.exec(ExecRequest(args=("tail", "-n", "30", START_LOG), timeout=10))
    return tail.stdout.decode(errors="replace") or "(the start command wrote nothing)"
