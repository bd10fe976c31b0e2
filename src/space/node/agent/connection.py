"""One session with an agent: socket, handshake, frame reader, channels, keepalive.

`Connection.open` connects to the agent's Unix socket (QEMU's chardev, or the
agent itself in tests), retrying until it exists, then sends HELLO with a
random nonce and the generations this host speaks, re-sending it every second
(bytes sent before the guest opened its port may be lost; the first re-send is
preceded by a maximal PAD frame that flushes out any stale partial frame the
agent is still waiting to complete), and scans the
incoming bytes for the HELLO_ACK that echoes the nonce, ignoring anything a
previous session left in the pipe. After that every frame is strict; a single
reader task routes frames to channels and never blocks on a consumer.

The agent is not trusted to keep to the protocol: each channel counts what it
holds unconsumed (see `HostChannel.deliver`), and an agent that sends past its
credit window, floods a channel with frames, or sends a frame type the host
never expects on a channel is cut off (`AgentCutOff`): the connection closes
and every call on it fails, so the host's buffers stay bounded.

The keepalive can be held (`hold_keepalive`) while the VM is paused: a guest
whose vCPUs are stopped cannot answer a ping, and that is no reason to drop it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from pathlib import Path

from space.guest.protocol import (
    GENERATIONS,
    STREAM_TYPES,
    Frame,
    FrameDecoder,
    FrameError,
    FrameType,
    encode,
    encode_json,
    pad_frame,
)
from space.node.agent.channel import HostChannel, reply_result
from space.node.agent.errors import AgentCutOff, AgentError, AgentUnavailable, ProtocolMismatch
from space.tasks import TaskSet

log = logging.getLogger(__name__)
_RETRY_INTERVAL = 0.05
_HELLO_INTERVAL = 1.0
_READ_SIZE = 256 << 10
_WANT_ACK = frozenset({FrameType.HELLO_ACK})
#: What an agent may send on a channel; anything else there is a protocol breach.
_FROM_AGENT = STREAM_TYPES - {FrameType.STDIN} | {FrameType.REPLY, FrameType.CREDIT}


class Connection:
    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        decoder: FrameDecoder,
        *,
        generation: int,
        agent: dict[str, object],
        io_timeout: float,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._decoder = decoder
        self.generation = generation
        self.agent = agent
        self.io_timeout = io_timeout
        self._channels: dict[int, HostChannel] = {}
        self._next_channel = 1
        self._tasks = TaskSet("agent-connection")
        self._pong = asyncio.Event()
        self._failure: AgentError | None = None
        self._held = 0  # > 0 while the keepalive is held (the VM is paused)
        self._holds = 0  # holds taken so far: a ping outstanding across one is excused

    @classmethod
    async def open(
        cls,
        socket_path: Path,
        *,
        timeout: float,
        generations: tuple[int, ...] = GENERATIONS,
        io_timeout: float = 30.0,
        keepalive: float | None = 10.0,
        wait_for_socket: bool = True,
    ) -> Connection:
        """`wait_for_socket=False`: one connection attempt, no retrying until the
        socket appears (for re-connecting to an agent that was there before)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_unix_connection(socket_path, limit=_READ_SIZE),
                    timeout=max(0.0, deadline - loop.time()),
                )
                break
            except (FileNotFoundError, ConnectionRefusedError) as exc:
                if not wait_for_socket or loop.time() >= deadline:
                    raise AgentUnavailable(f"cannot connect to {socket_path}: {exc}") from exc
                await asyncio.sleep(_RETRY_INTERVAL)
            except (TimeoutError, OSError) as exc:
                raise AgentUnavailable(f"cannot connect to {socket_path}: {exc}") from exc
        try:
            decoder = FrameDecoder()
            ack = await _handshake(reader, writer, decoder, generations, deadline)
        except BaseException:
            writer.close()
            raise
        chosen = ack.get("generation")
        agent = ack.get("agent")
        conn = cls(
            reader,
            writer,
            decoder,
            generation=chosen if isinstance(chosen, int) else 0,
            agent=agent if isinstance(agent, dict) else {},
            io_timeout=io_timeout,
        )
        conn._tasks.spawn(conn._read_loop(), "reader")
        if keepalive is not None:
            conn._tasks.spawn(conn._keepalive(keepalive), "keepalive")
        return conn

    @property
    def closed(self) -> bool:
        return self._failure is not None

    @property
    def failure(self) -> AgentError | None:
        """Why the connection ended, once it has."""
        return self._failure

    def check(self) -> None:
        if isinstance(self._failure, AgentCutOff):
            raise self._failure
        if self._failure is not None:
            raise AgentUnavailable(str(self._failure)) from self._failure

    def hold_keepalive(self) -> None:
        """Stop pinging (and excuse a ping in flight) until `release_keepalive`."""
        self._held += 1
        self._holds += 1

    def release_keepalive(self) -> None:
        self._held = max(0, self._held - 1)

    async def send(self, data: bytes) -> None:
        self.check()
        try:
            self._writer.write(data)
            await asyncio.wait_for(self._writer.drain(), timeout=self.io_timeout)
        except TimeoutError as exc:
            self._fail(AgentUnavailable(f"agent did not read for {self.io_timeout}s"))
            raise AgentUnavailable("agent stopped reading") from exc
        except (ConnectionError, OSError) as exc:
            self._fail(AgentUnavailable(f"connection lost: {exc}"))
            raise AgentUnavailable(f"connection lost: {exc}") from exc

    async def open_channel(self, request: dict[str, object]) -> HostChannel:
        self.check()
        channel = HostChannel(self._next_channel, self)
        self._next_channel = self._next_channel % 0xFFFFFFFF + 1
        self._channels[channel.id] = channel
        try:
            await self.send(encode_json(FrameType.REQUEST, channel.id, request))
        except AgentError:
            self._channels.pop(channel.id, None)
            raise
        return channel

    async def call(
        self, op: str, body: dict[str, object] | None = None, *, timeout: float | None = None
    ) -> dict[str, object]:
        """A request with a single reply; its result, or the agent's error raised."""
        channel = await self.open_channel({"op": op, **(body or {})})
        try:
            return reply_result(await channel.next(timeout=timeout or self.io_timeout))
        except BaseException:
            await channel.cancel()
            raise

    def forget(self, channel: HostChannel) -> None:
        self._channels.pop(channel.id, None)

    async def close(self) -> None:
        self._fail(AgentUnavailable("agent client closed"))
        await self._tasks.cancel_all()

    def _fail(self, error: AgentError) -> None:
        if self._failure is not None:
            return
        self._failure = error
        for channel in list(self._channels.values()):
            channel.fail(error)
        self._channels.clear()
        self._writer.close()

    async def _read_loop(self) -> None:
        try:
            while True:
                while (frame := self._decoder.next_frame()) is not None:
                    self._dispatch(frame)
                data = await self._reader.read(_READ_SIZE)
                if not data:
                    self._fail(AgentUnavailable("agent closed the connection"))
                    return
                self._decoder.feed(data)
        except FrameError as exc:
            self._fail(AgentUnavailable(f"malformed frame from agent: {exc}"))
        except (ConnectionError, OSError) as exc:
            self._fail(AgentUnavailable(f"connection lost: {exc}"))
        except Exception as exc:  # never leave callers waiting on a dead reader
            self._fail(AgentUnavailable(f"agent connection reader failed: {exc!r}"))
            raise

    def _dispatch(self, frame: Frame) -> None:
        if frame.channel == 0:
            if frame.type is FrameType.PONG:
                self._pong.set()
            elif frame.type is FrameType.ERROR:
                self._fail(AgentUnavailable(f"agent reported a protocol error: {frame.payload!r}"))
            return
        if frame.type not in _FROM_AGENT:
            self._fail(AgentCutOff(f"agent sent a {frame.type.name} frame on a channel; cut off"))
            return
        channel = self._channels.get(frame.channel)
        if channel is None:
            return  # a late frame for a channel we cancelled
        if frame.type is FrameType.CREDIT:
            count = frame.json().get("bytes")
            if isinstance(count, int):
                channel.on_credit(count)
            return
        if frame.type is FrameType.REPLY:
            self._channels.pop(frame.channel, None)
        violation = channel.deliver(frame)
        if violation is not None:
            self._fail(AgentCutOff(f"channel {channel.id}: {violation}; agent cut off"))

    async def _keepalive(self, interval: float) -> None:
        while not self.closed:
            await asyncio.sleep(interval)
            if self._held:
                continue
            holds = self._holds
            self._pong.clear()
            with contextlib.suppress(AgentError):
                await self.send(encode(FrameType.PING, 0))
            try:  # not wait_for: under 3.11 it can swallow this loop's cancellation
                async with asyncio.timeout(self.io_timeout):
                    await self._pong.wait()
            except TimeoutError:
                if self._held or self._holds != holds:
                    continue  # the VM was paused meanwhile: no answer was possible
                self._fail(AgentUnavailable(f"agent did not answer a ping in {self.io_timeout}s"))


async def _handshake(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    decoder: FrameDecoder,
    generations: tuple[int, ...],
    deadline: float,
) -> dict[str, object]:
    loop = asyncio.get_running_loop()
    nonce = secrets.token_hex(16)
    hello = encode_json(
        FrameType.HELLO, 0, {"nonce": nonce, "generations": list(generations), "client": "space"}
    )
    next_hello = 0.0
    attempts = 0
    while True:
        now = loop.time()
        if now >= deadline:
            raise AgentUnavailable("agent did not answer the handshake in time")
        if now >= next_hello:
            # On the first retry, precede the HELLO with a maximal PAD frame: it
            # completes (and so invalidates) any stale partial frame the agent
            # may still be waiting on from an earlier host.
            writer.write(pad_frame() + hello if attempts == 1 else hello)
            attempts += 1
            next_hello = now + _HELLO_INTERVAL
        try:
            data = await asyncio.wait_for(
                reader.read(_READ_SIZE), timeout=min(next_hello, deadline) - now
            )
        except TimeoutError:
            continue
        except (ConnectionError, OSError) as exc:
            raise AgentUnavailable(f"connection lost during handshake: {exc}") from exc
        if not data:
            raise AgentUnavailable("agent closed the connection during the handshake")
        decoder.feed(data)
        while (frame := decoder.scan(_WANT_ACK)) is not None:
            try:
                ack = frame.json()
            except FrameError:
                continue
            if ack.get("nonce") != nonce:
                continue  # an answer to an earlier host's HELLO
            return _check_ack(ack, generations)


def _check_ack(ack: dict[str, object], generations: tuple[int, ...]) -> dict[str, object]:
    agent = ack.get("agent")
    offered = agent.get("generations") if isinstance(agent, dict) else []
    if not isinstance(offered, list):
        offered = []
    agent_generations = [g for g in offered or [] if isinstance(g, int)]
    error = ack.get("error")
    if isinstance(error, dict):
        raise ProtocolMismatch(
            f"agent refused the handshake: {error.get('message')}",
            agent_generations=agent_generations,
        )
    chosen = ack.get("generation")
    if not isinstance(chosen, int) or chosen not in generations:
        raise ProtocolMismatch(
            f"agent chose generation {chosen!r}, this host speaks {list(generations)}",
            agent_generations=agent_generations,
        )
    return ack
