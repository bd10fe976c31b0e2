"""Domain errors raised by the store; the API maps each to one HTTP status.

StoreError
 ├── NotFound            the row does not exist (or is not visible to the caller)
 ├── InvalidTransition   the state machine forbids the requested change   (409)
 ├── NodeStateRefused    a node cannot go to the requested registry state (`space nodes`)
 ├── StaleGeneration     the row changed since the caller read it         (409)
 ├── NoLongerDue         an expiry lost to activity or a new deadline (never reaches the API)
 └── DatabaseUnavailable the database cannot be reached or cut the call short      (503)
"""

from __future__ import annotations


class StoreError(Exception):
    """Base class for store errors."""


class NotFound(StoreError):
    def __init__(self, kind: str, ident: str) -> None:
        super().__init__(f"{kind} {ident!r} not found")
        self.kind = kind
        self.ident = ident


class InvalidTransition(StoreError):
    def __init__(self, sandbox_id: str, current: str, target: str) -> None:
        super().__init__(f"sandbox {sandbox_id} cannot go from {current!r} to {target!r}")
        self.sandbox_id = sandbox_id
        self.current = current
        self.target = target


class NodeStateRefused(StoreError):
    def __init__(self, name: str, current: str, target: str) -> None:
        super().__init__(f"node {name} cannot go from {current!r} to {target!r}")
        self.name = name
        self.current = current
        self.target = target


class StaleGeneration(StoreError):
    def __init__(self, sandbox_id: str, expected: int, actual: int | None) -> None:
        super().__init__(f"sandbox {sandbox_id} is at generation {actual}, expected {expected}")
        self.sandbox_id = sandbox_id
        self.expected = expected
        self.actual = actual


class NoLongerDue(StoreError):
    def __init__(self, sandbox_id: str) -> None:
        super().__init__(f"sandbox {sandbox_id} was used or got a new deadline; not expiring it")
        self.sandbox_id = sandbox_id


class DatabaseUnavailable(StoreError):
    """The database did not answer (down, restarting, unreachable, out of time).

    The message is for clients: it names no host, socket or user; the cause is
    chained (and logged once per outage by `Database`).
    """

    #: Seconds a client is told to wait before it retries (`Retry-After`).
    retry_after = 2

    def __init__(self) -> None:
        super().__init__("the database is unavailable; retry shortly")
