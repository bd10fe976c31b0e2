"""The process's file-descriptor budget (`RLIMIT_NOFILE`).

One server process holds the API's sockets, every sandbox's agent and QMP
sockets, and the gateway's listeners and connections, so the default soft
limit (often 1,024) runs out long before the host does. `raise_nofile()` lifts
the soft limit to the hard one (never above `NOFILE_CAP`) once at startup and
logs the budget; `/metrics` exports it as `process_max_fds`, so per-sandbox caps
can be checked against it (`nofile_budget()`).
"""

from __future__ import annotations

import logging
import resource
from dataclasses import dataclass

log = logging.getLogger(__name__)

NOFILE_CAP = 1_048_576


@dataclass(frozen=True)
class NofileLimit:
    soft: int
    hard: int  # resource.RLIM_INFINITY is reported as NOFILE_CAP


def nofile_budget() -> NofileLimit:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return NofileLimit(_finite(soft), _finite(hard))


def raise_nofile(cap: int = NOFILE_CAP) -> NofileLimit:
    """Soft limit := min(hard, cap) unless it is already higher; logs the result."""
    before = nofile_budget()
    wanted = min(before.hard, cap)
    if wanted > before.soft:
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    after = nofile_budget()
    log.info(
        "RLIMIT_NOFILE: soft %d (was %d), hard %d: the budget for every socket and file",
        after.soft,
        before.soft,
        after.hard,
    )
    return after


def _finite(value: int) -> int:
    return NOFILE_CAP if value == resource.RLIM_INFINITY else value
