"""The one retry loop behind every commit that may lose a race."""

from __future__ import annotations

import pytest

from deltasink.retry import backoff, retry


class Conflict(Exception):
    pass


def test_retryable_failures_are_retried_until_the_call_succeeds() -> None:
    calls: list[int] = []
    refreshed: list[int] = []

    def call() -> str:
        calls.append(len(calls))
        if len(calls) < 3:
            raise Conflict("lost the race")
        return "done"

    result = retry(
        call,
        attempts=5,
        retryable=lambda exc: isinstance(exc, Conflict),
        exhausted=lambda n, exc: RuntimeError(n),
        what="test",
        cap=0.0,
        before_retry=lambda: refreshed.append(1),
    )
    assert result == "done"
    assert calls == [0, 1, 2]
    assert refreshed == [1, 1]


def test_the_named_error_comes_after_the_last_attempt_chained_to_the_failure() -> None:
    calls: list[int] = []

    def call() -> None:
        calls.append(1)
        raise Conflict(f"attempt {len(calls)}")

    with pytest.raises(RuntimeError, match="gave up after 3") as info:
        retry(
            call,
            attempts=3,
            retryable=lambda exc: isinstance(exc, Conflict),
            exhausted=lambda n, exc: RuntimeError(f"gave up after {n}: {exc}"),
            what="test",
            cap=0.0,
        )
    assert len(calls) == 3
    assert str(info.value.__cause__) == "attempt 3"


def test_other_failures_propagate_at_once() -> None:
    calls: list[int] = []

    def call() -> None:
        calls.append(1)
        raise ValueError("bad input")

    with pytest.raises(ValueError, match="bad input"):
        retry(
            call,
            attempts=5,
            retryable=lambda exc: isinstance(exc, Conflict),
            exhausted=lambda n, exc: RuntimeError(n),
            what="test",
        )
    assert calls == [1]


def test_backoff_doubles_from_a_tenth_of_a_second_within_its_cap_and_jitter() -> None:
    for attempt, base in [(1, 0.1), (2, 0.2), (3, 0.4), (6, 2.0), (9, 2.0)]:
        delays = [backoff(attempt, 2.0) for _ in range(200)]
        assert all(0.5 * base <= d <= 1.5 * base for d in delays)
        assert max(delays) - min(delays) > 0.2 * base
