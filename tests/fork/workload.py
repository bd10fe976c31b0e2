"""A guest workload whose state lives only in a process's memory, and helpers to read it.

The keeper holds a random secret in memory: SIGUSR1 writes it (and its pid) to
/tmp/secret, SIGUSR2 draws a new one, so a test can change memory in one sandbox
and read it in another.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from space.seam.protocol import CommandHandle
from space.seam.values import ExecRequest, ExecResult

KEEPER = (
    'python3 -c "import os, signal, time\n'
    "secret = os.urandom(16).hex()\n"
    "def dump(*_):\n"
    "    with open('/tmp/secret.tmp', 'w') as out: out.write(f'{os.getpid()} {secret}')\n"
    "    os.replace('/tmp/secret.tmp', '/tmp/secret')\n"  # a reader never sees it half-written
    "def redraw(*_):\n"
    "    global secret\n"
    "    secret = os.urandom(16).hex()\n"
    "signal.signal(signal.SIGUSR1, dump)\n"
    "signal.signal(signal.SIGUSR2, redraw)\n"
    "dump()\n"
    'while True: time.sleep(1)"'
)


class Execs(Protocol):
    async def exec(self, sandbox_id: str, request: ExecRequest) -> ExecResult: ...

    async def start_command(self, sandbox_id: str, request: ExecRequest) -> CommandHandle: ...


async def sh(node: Execs, sandbox_id: str, cmd: str) -> str:
    result = await node.exec(sandbox_id, ExecRequest(cmd=cmd))
    assert result.exit_code == 0, result.stderr
    return result.stdout.decode()


async def start_keeper(node: Execs, sandbox_id: str) -> tuple[str, str]:
    """Start the keeper; its (pid, secret)."""
    await node.start_command(sandbox_id, ExecRequest(cmd=KEEPER))
    for _ in range(100):
        if (await node.exec(sandbox_id, ExecRequest(cmd="cat /tmp/secret"))).exit_code == 0:
            break
        await asyncio.sleep(0.1)
    pid, secret = (await sh(node, sandbox_id, "cat /tmp/secret")).split()
    return pid, secret


async def read_secret(node: Execs, sandbox_id: str, pid: str) -> str:
    """What the keeper `pid` holds in memory now."""
    await sh(node, sandbox_id, f"rm -f /tmp/secret; kill -USR1 {pid}")
    for _ in range(100):
        got = await node.exec(sandbox_id, ExecRequest(cmd="cat /tmp/secret"))
        if got.exit_code == 0 and got.stdout:
            return got.stdout.decode().split()[1]
        await asyncio.sleep(0.1)
    raise AssertionError("the keeper process did not answer")
