"""Token buckets: a burst, then Retry-After; all levels or none; bounded memory."""

from __future__ import annotations

import pytest

from space.credentials.model import RateLimit
from space.credentials.ratelimit import BucketKey, RateLimiter, retry_after_header

pytestmark = pytest.mark.credentials


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_call_after_the_burst_gets_a_retry_after() -> None:
    clock = Clock()
    limiter = RateLimiter(clock=clock)
    key = [(BucketKey("sandbox", "sbx_1", "cred_1"), RateLimit(rps=0.5, burst=3))]
    assert [limiter.take(key) for _ in range(3)] == [None, None, None]
    wait = limiter.take(key)
    assert wait == pytest.approx(2.0)
    assert retry_after_header(wait or 0) == "2"
    clock.now += 2.0
    assert limiter.take(key) is None


def test_a_refusal_at_one_level_takes_no_token_at_the_others() -> None:
    clock = Clock()
    limiter = RateLimiter(clock=clock)
    sandbox = (BucketKey("sandbox", "sbx_1", "c"), RateLimit(rps=1, burst=5))
    org = (BucketKey("org", "org_1", "c"), RateLimit(rps=1, burst=1))
    assert limiter.take([sandbox, org]) is None
    assert limiter.take([sandbox, org]) is not None
    for _ in range(4):
        assert limiter.take([sandbox]) is None
    assert limiter.take([sandbox]) is not None


def test_buckets_are_bounded() -> None:
    limiter = RateLimiter(max_buckets=10, clock=Clock())
    rate = RateLimit(rps=1, burst=1)
    for i in range(1000):
        limiter.take([(BucketKey("sandbox", f"sbx_{i}", "c"), rate)])
    assert len(limiter) == 10
