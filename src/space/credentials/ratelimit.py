"""Token buckets per (sandbox | project | org, credential).

`RateLimiter.take` draws one token from every bucket a request is counted in, or
from none: over any limit, it answers how many seconds until all of them have a
token (the `Retry-After`). Memory is bounded: at most `max_buckets` buckets; when
full, the least recently used one goes first (an idle bucket is a full one, so
forgetting it only forgives what it had refilled anyway).
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from space.credentials.model import RateLimit

Level = Literal["sandbox", "project", "org"]
DEFAULT_MAX_BUCKETS = 100_000


@dataclass(frozen=True)
class BucketKey:
    level: Level
    target: str  # the sandbox, project or org id
    credential_id: str


@dataclass
class _Bucket:
    tokens: float
    at: float
    rate: RateLimit

    def refill(self, now: float, rate: RateLimit) -> None:
        self.tokens = min(rate.burst, self.tokens + (now - self.at) * rate.rps)
        self.at = now
        self.rate = rate


class RateLimiter:
    """Thread-safe buckets; `clock` is injectable for tests (monotonic seconds)."""

    def __init__(
        self,
        max_buckets: int = DEFAULT_MAX_BUCKETS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._buckets: OrderedDict[BucketKey, _Bucket] = OrderedDict()
        self._max = max_buckets
        self._clock = clock
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, limits: Sequence[tuple[BucketKey, RateLimit]]) -> float | None:
        """None if allowed (a token taken from each bucket), else the seconds to wait."""
        with self._lock:
            now = self._clock()
            buckets = [(self._bucket(key, rate, now), rate) for key, rate in limits]
            waits = [(1 - b.tokens) / rate.rps for b, rate in buckets if b.tokens < 1]
            if waits:
                return max(waits)
            for bucket, _rate in buckets:
                bucket.tokens -= 1
            return None

    def _bucket(self, key: BucketKey, rate: RateLimit, now: float) -> _Bucket:
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = _Bucket(tokens=float(rate.burst), at=now, rate=rate)
            self._buckets[key] = bucket
            while len(self._buckets) > self._max:
                self._buckets.popitem(last=False)
        else:
            bucket.refill(now, rate)
            self._buckets.move_to_end(key)
        return bucket


def retry_after_header(seconds: float) -> str:
    """`Retry-After` in whole seconds, at least 1."""
    return str(max(1, math.ceil(seconds)))
