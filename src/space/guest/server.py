"""The agent's outer loop: links come and go, sessions start with a HELLO."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping

from space.guest import __version__
from space.guest.batch import batch_handler
from space.guest.files import file_handlers
from space.guest.link import Link, LinkSource
from space.guest.ops import Body, Handler
from space.guest.processes import ProcessTable, process_handlers
from space.guest.protocol import (
    GENERATIONS,
    ErrorCode,
    Frame,
    FrameDecoder,
    FrameError,
    FrameType,
    choose_generation,
    encode_json,
)
from space.guest.session import Session
from space.guest.system import SystemState, system_handlers
from space.guest.watch import watch_handlers

log = logging.getLogger(__name__)
_WANT_HELLO = frozenset({FrameType.HELLO})


class Agent:
    """State that outlives sessions: processes, identity, start time."""

    def __init__(self, system: SystemState, *, generations: tuple[int, ...] = GENERATIONS) -> None:
        self.processes = ProcessTable()
        self.system = system
        self.generations = generations
        self.started = time.monotonic()
        handlers: dict[str, Handler] = {
            **process_handlers(self.processes),
            **file_handlers(),
            **watch_handlers(),
            **system_handlers(system, self.info),
        }
        handlers["batch"] = batch_handler(handlers)
        self.handlers: Mapping[str, Handler] = handlers

    def info(self) -> Body:
        return {
            "version": __version__,
            "generations": list(self.generations),
            "pid": os.getpid(),
            "uptime": round(time.monotonic() - self.started, 3),
            "processes": len(self.processes),
        }

    def answer(self, hello: Frame) -> tuple[bytes, int | None]:
        """The HELLO_ACK for a HELLO, and the generation chosen (None: refused)."""
        try:
            body = hello.json()
        except FrameError:
            body = {}
        nonce = body.get("nonce")
        offered = body.get("generations")
        generations = (
            [g for g in offered if isinstance(g, int)] if isinstance(offered, list) else []
        )
        chosen = choose_generation(generations, self.generations)
        ack: Body = {"nonce": nonce, "agent": self.info()}
        if chosen is None:
            ack["error"] = {
                "code": str(ErrorCode.UNSUPPORTED_GENERATION),
                "message": f"agent speaks generations {list(self.generations)}, "
                f"host offered {generations}",
                "path": None,
            }
        else:
            ack["generation"] = chosen
        return encode_json(FrameType.HELLO_ACK, 0, ack), chosen

    async def serve(self, source: LinkSource) -> None:
        self.processes.start()
        try:
            while True:
                link = await source.next_link()
                try:
                    await self.run_link(link)
                except ConnectionError as exc:
                    log.info("link lost: %s", exc)
                except Exception:  # the agent must outlive any one host's mistakes
                    log.exception("session failed; waiting for the next host")
                finally:
                    link.close()
        finally:
            await self.processes.close()

    async def run_link(self, link: Link) -> None:
        decoder = FrameDecoder()
        hello: Frame | None = None
        while True:
            if hello is None:
                hello = await _scan(link, decoder)
                if hello is None:
                    return
            ack, generation = self.answer(hello)
            nonce, hello = _nonce(hello), None
            await link.write(ack)
            if generation is None:
                continue
            log.info("session started, generation %d", generation)
            session = Session(link, decoder, self.handlers, generation)
            try:
                while (hello := await session.run()) is not None and _nonce(hello) == nonce:
                    await link.write(ack)  # a HELLO the host repeated while we booted
                if hello is None:
                    log.info("host disconnected")
                    return
            except FrameError as exc:
                log.warning("protocol error, resynchronising: %s", exc)
                error: Body = {"code": str(exc.code), "message": str(exc), "path": None}
                await link.write(encode_json(FrameType.ERROR, 0, error))
            finally:
                await session.close()


async def _scan(link: Link, decoder: FrameDecoder) -> Frame | None:
    while (frame := decoder.scan(_WANT_HELLO)) is None:
        data = await link.read()
        if not data:
            return None
        decoder.feed(data)
    return frame


def _nonce(hello: Frame) -> object:
    try:
        return hello.json().get("nonce")
    except FrameError:
        return None
