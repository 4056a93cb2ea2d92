"""One retry loop for every commit that may lose a race with a concurrent writer
(Delta's optimistic concurrency): jittered exponential backoff, a bounded number of
attempts, and a named error when they run out."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["backoff", "retry"]

logger = logging.getLogger("deltasink")

T = TypeVar("T")


def backoff(attempt: int, cap: float) -> float:
    """Seconds to wait after failed ``attempt`` (1-based): 0.1 s doubling up to
    ``cap``, jittered by ±50% so that racing writers spread out."""
    return float(min(cap, 0.05 * 2**attempt) * (0.5 + random.random()))


def retry(
    call: Callable[[], T],
    *,
    attempts: int,
    retryable: Callable[[Exception], bool],
    exhausted: Callable[[int, Exception], Exception],
    what: str,
    cap: float = 2.0,
    before_retry: Callable[[], object] | None = None,
) -> T:
    """``call()``, again after each retryable failure, at most ``attempts`` times.

    Args:
        call: One attempt; it re-reads whatever state it depends on.
        attempts: The bound (≥ 1).
        retryable: Whether a failure is worth another attempt (a commit conflict);
            any other exception propagates at once.
        exhausted: The error to raise (chained to the last failure) when the last
            attempt failed too, given the number of attempts and that failure.
        what: What is attempted, for the log line of each retry.
        cap: Upper bound of the backoff in seconds (``0``: retry at once).
        before_retry: Called before each new attempt (e.g. refresh a snapshot).
    """
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except Exception as exc:
            if not retryable(exc):
                raise
            if attempt >= attempts:
                raise exhausted(attempt, exc) from exc
            delay = backoff(attempt, cap) if cap > 0 else 0.0
            logger.info(
                "%s conflicted (%s); attempt %s/%s in %.2f s",
                what,
                exc,
                attempt + 1,
                attempts,
                delay,
            )
            if delay:
                time.sleep(delay)
            if before_retry is not None:
                before_retry()
    raise AssertionError("unreachable: attempts must be ≥ 1")
