"""django-q2 task functions for the raw baseline of the relay benchmark."""

from __future__ import annotations

import os

_redis = None


def noop(counter_key: str) -> None:
    """Do nothing but count the run (one Redis INCR), so the bench sees it finish."""
    global _redis
    if _redis is None:
        import redis

        _redis = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
    _redis.incr(counter_key)
