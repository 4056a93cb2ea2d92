"""Commit timestamps in the commit ledger (:mod:`deltasink.ops.history`): delta-rs gives
epoch milliseconds; classic Spark's ``DESCRIBE HISTORY`` gives naive datetimes in the
session's local time, which must not be read as UTC.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest

from deltasink.backends.spark.ledger import StagingLedger
from deltasink.ops.history import _timestamp, history_from_commits

NOON_UTC = datetime(2024, 1, 1, 12, 0, tzinfo=timezone.utc)


@pytest.fixture
def utc_minus_5(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process's local time zone is UTC-5 (a POSIX rule: no tz database needed)."""
    monkeypatch.setenv("TZ", "EST+05")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_a_naive_datetime_is_local_time(utc_minus_5: None) -> None:
    stamp = _timestamp(datetime(2024, 1, 1, 7, 0))  # 07:00 at UTC-5
    assert stamp == NOON_UTC
    assert stamp.tzinfo == timezone.utc


def test_aware_datetimes_and_epoch_millis_keep_their_instant(utc_minus_5: None) -> None:
    plus_two = timezone(timedelta(hours=2))
    assert _timestamp(datetime(2024, 1, 1, 14, 0, tzinfo=plus_two)) == NOON_UTC
    assert _timestamp(datetime(2024, 1, 1, 14, 0, tzinfo=plus_two)).tzinfo == timezone.utc
    assert _timestamp(NOON_UTC) == NOON_UTC
    millis = int(NOON_UTC.timestamp() * 1000)
    assert _timestamp(millis) == NOON_UTC
    assert _timestamp(millis).tzinfo == timezone.utc


def test_describe_history_rows_get_utc_timestamps(utc_minus_5: None) -> None:
    row = {  # as DESCRIBE HISTORY returns it on a classic session: naive, local time
        "version": 3,
        "timestamp": datetime(2024, 1, 1, 7, 0),
        "operation": "MERGE",
        "operationMetrics": {"numTargetRowsInserted": "2"},
        "userMetadata": "deltasink commit app=app version=9",
    }
    (entry,) = history_from_commits([row], "app")
    assert (entry.version, entry.target_version, entry.timestamp) == (9, 3, NOON_UTC)
    assert entry.to_dict()["timestamp"] == "2024-01-01T12:00:00+00:00"


def test_the_spark_staging_ledger_reads_timestamps_the_same_way(utc_minus_5: None) -> None:
    ledger = StagingLedger("app")
    ledger.apply(
        [
            {
                "version": 1,
                "timestamp": datetime(2024, 1, 1, 7, 0),
                "userMetadata": 'deltasink stage-empty app=app version=4 columns=["id"]',
            }
        ]
    )
    assert ledger.empty == {4: NOON_UTC}


def test_an_auto_compaction_carrying_the_writes_user_metadata_applies_no_version() -> None:
    """Delta's auto compaction on Spark runs as a post-commit hook in the writing
    session, so its OPTIMIZE commit records the write's ``userMetadata``: it is not a
    second commit of that version (seen with delta-spark 4.4 and
    ``delta.autoOptimize.autoCompact=true``)."""
    merge = {
        "version": 5,
        "timestamp": 1_700_000_000_000,
        "operation": "MERGE",
        "userMetadata": "deltasink commit app=app version=3 versions=2,3",
    }
    compaction = {**merge, "version": 6, "operation": "OPTIMIZE"}
    (entry,) = history_from_commits([compaction, merge], "app")
    assert (entry.target_version, entry.versions) == (5, (2, 3))
