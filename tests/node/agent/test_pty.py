"""Interactive terminals: resize and echo."""

from __future__ import annotations

import pytest

from space.node.agent import AgentClient, AgentProcess
from space.seam.values import ExecRequest

pytestmark = pytest.mark.timeout(20)


class Terminal:
    def __init__(self, process: AgentProcess) -> None:
        self.process = process
        self.events = process.events()
        self.screen = b""

    async def expect(self, needle: bytes) -> None:
        while needle not in self.screen:
            event = await anext(self.events)
            assert event.kind == "stdout", f"terminal ended early: {self.screen!r}"
            self.screen += event.data
        self.screen = self.screen[self.screen.index(needle) + len(needle) :]


async def test_stty_size_follows_resize(agent_client: AgentClient) -> None:
    process = await agent_client.start(ExecRequest(args=("/bin/sh", "-i"), pty=(24, 80)))
    term = Terminal(process)
    await process.write_stdin(b"stty size\n")
    await term.expect(b"24 80")
    await process.resize(40, 132)
    await process.write_stdin(b"stty size; echo $TERM\n")
    await term.expect(b"40 132")
    await term.expect(b"xterm-256color")
    await process.write_stdin(b"exit 3\n")
    async for _ in term.events:
        pass
    assert process.exit_code == 3


async def test_shell_echoes_typed_input(agent_client: AgentClient) -> None:
    process = await agent_client.start(ExecRequest(args=("/bin/sh", "-i"), pty=(24, 80)))
    term = Terminal(process)
    await process.write_stdin(b"echo ab''cd\n")
    await term.expect(b"echo ab''cd")  # the terminal echoed what was typed
    await term.expect(b"abcd")  # and the shell ran it
    await process.close_stdin()  # ^D at the prompt ends the shell
    async for _ in term.events:
        pass
    assert process.exit_code == 0


async def test_resize_without_a_terminal_is_invalid(agent_client: AgentClient) -> None:
    process = await agent_client.start(ExecRequest(args=("sleep", "5")))
    with pytest.raises(Exception, match="no terminal"):
        await process.resize(10, 10)
    await process.signal(9)
    await process.wait()
