"""`python -m space.guest [--device auto|PATH | --unix PATH]`.

With no arguments the agent serves the virtio-serial port named `space.agent`
(`--device auto`); having found it, it is in a guest, and it first grows the root
filesystem to fill its disk (`rootfs.grow_root`). `--unix PATH` makes it *listen*
on a Unix socket instead, like QEMU's `-chardev socket,server=on`; the host
connects, and a newer connection replaces the current one. That is how tests run
it on a host (with `--device PATH` too; neither grows anything).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from pathlib import Path

from space.guest import __version__
from space.guest.link import DeviceSource, LinkSource, UnixSource
from space.guest.protocol import GENERATIONS
from space.guest.rootfs import grow_root
from space.guest.server import Agent
from space.guest.system import SystemState

log = logging.getLogger("space.guest")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m space.guest", description=__doc__)
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--device", default="auto", help="virtio-serial port: auto or a path")
    where.add_argument("--unix", type=Path, help="listen on this Unix socket instead")
    parser.add_argument(
        "--identity-file", type=Path, default=SystemState.identity_file, help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--hostname-file", type=Path, default=SystemState.hostname_file, help=argparse.SUPPRESS
    )
    parser.add_argument("--log-level", default="INFO")
    return parser


async def _main(args: argparse.Namespace) -> None:
    source: LinkSource
    if args.unix is not None:
        unix = UnixSource(args.unix)
        await unix.start()
        source = unix
    elif args.device == "auto":
        source = await DeviceSource.auto()
        await asyncio.to_thread(grow_root)  # only a guest has a port named space.agent
    else:
        source = DeviceSource(Path(args.device))
    state = SystemState(identity_file=args.identity_file, hostname_file=args.hostname_file)
    agent = Agent(state, generations=GENERATIONS)
    serving = asyncio.current_task()
    assert serving is not None
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, serving.cancel)
    log.info("space agent %s ready (generations %s)", __version__, list(GENERATIONS))
    try:
        await agent.serve(source)
    except asyncio.CancelledError:
        log.info("space agent stopping")
    finally:
        source.close()


def main() -> None:
    args = _parser().parse_args()
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    asyncio.run(_main(args))


if __name__ == "__main__":
    main()
