"""One retry loop for every commit that may lose a race with a concurrent writer
(Delta's optimistic concurrency): jittered exponential backoff, a bounded number of
attempts, and a named error when they run out."""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable
from typing import TypeVar

from deltasink.core.telemetry import Recorder

__all__ = ["backoff", "retry"]

logger = logging.getLogger("deltasink")

T = TypeVar("T")


def backoff(attempt: int, cap: float, base: float | None = None) -> float:
    """Seconds to wait after failed ``attempt`` (1-based).

    With ``base`` (the seconds the failed attempt took: how long a commit holds the
    table now, contention included), the wait is drawn from ``[w/2, w]`` with ``w =
    base * 2**min(attempt - 1, 3)`` bounded by ``cap``: racing writers spread over about
    one commit's time, then two, four, at most eight, so the table is neither idle while
    they sleep nor stormed by immediate retries, and a writer that lost several times
    does not wait much longer than the others (its p99). Without it: 0.1 s doubling up to ``cap``,
    jittered by ±50%."""
    if base is None or os.environ.get("DELTASINK_BACKOFF") == "fixed":
        return float(min(cap, 0.05 * 2**attempt) * (0.5 + random.random()))
    bound = min(cap, max(0.005, base) * 2 ** min(attempt - 1, 3))
    return float(bound * (0.5 + random.random() / 2))


def retry(
    call: Callable[[], T],
    *,
    attempts: int,
    retryable: Callable[[Exception], bool],
    exhausted: Callable[[int, Exception], Exception],
    what: str,
    cap: float = 2.0,
    before_retry: Callable[[], object] | None = None,
    recorder: Recorder | None = None,
    winner: Callable[[], tuple[int | None, str | None]] | None = None,
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
        recorder: The telemetry of the target commit attempted
            (:mod:`deltasink.core.telemetry`): told of each attempt and each conflict.
        winner: Given for target commits, whose conflicts are with other writers'
            commits of the same kind: their backoff scales with the failed attempt's
            duration (:func:`backoff`). Called after a conflict, when there is a
            ``recorder``: the target's newest Delta version and the deltasink app id
            that made it (the writer that won, or one after it).
    """
    for attempt in range(1, attempts + 1):
        if recorder is not None:
            recorder.attempt()
        started = time.perf_counter()
        try:
            return call()
        except Exception as exc:
            if not retryable(exc):
                raise
            took = time.perf_counter() - started if winner is not None else None
            delay = backoff(attempt, cap, took) if cap > 0 and attempt < attempts else 0.0
            if recorder is not None:
                won = _winner(winner)
                recorder.conflict(winner_version=won[0], winner_app=won[1], wait_s=delay)
            if attempt >= attempts:
                raise exhausted(attempt, exc) from exc
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


def _winner(
    winner: Callable[[], tuple[int | None, str | None]] | None,
) -> tuple[int | None, str | None]:
    """Who won a conflict, if it can be read (telemetry: never fails the commit)."""
    if winner is None:
        return None, None
    try:
        return winner()
    except Exception as exc:
        logger.debug("reading the winner of a conflict failed: %s", exc)
        return None, None
