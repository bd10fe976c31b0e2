"""Long-lived responses end when the key that opened them stops being valid.

An SSE or envd stream is authorised once, when it opens; `KeyWatch` re-checks
its key at most every `every` seconds, on each item or keepalive tick the
stream produces, so a revoked or expired key's stream ends within
`max(keepalive, every)` seconds. A check the database cannot answer ends the
stream as cleanly (a client re-attaches with `Last-Event-ID` once it is back):
a key that cannot be checked is not trusted.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import TypeVar

from space.store.db import Database
from space.store.errors import DatabaseUnavailable
from space.store.keys import KeyRepo

T = TypeVar("T")


class KeyWatch:
    def __init__(self, db: Database, key_id: str, every: float) -> None:
        self._db = db
        self._key_id = key_id
        self._every = every
        self._next = time.monotonic() + every
        self.cannot_check = False  # the last check found the database down

    def still_valid(self) -> bool:
        """False once the key is revoked or expired, or cannot be checked (checked
        at most every `every` s)."""
        now = time.monotonic()
        if now < self._next:
            return True
        self._next = now + self._every
        try:
            with self._db.session() as session:
                return KeyRepo(session).is_valid(self._key_id)
        except DatabaseUnavailable:
            self.cannot_check = True
            return False

    async def guard(self, items: AsyncIterator[T]) -> AsyncIterator[T]:
        """`items` until the key stops being valid (then the stream just ends)."""
        async for item in items:
            if not self.still_valid():
                return
            yield item
