"""The contract every backend of ``DeltaSink`` must pass: the SPEC scenarios.

A backend's test module subclasses :class:`SinkContract` and provides a ``harness``
fixture (see :class:`Harness`). Assertions read the Delta tables directly (delta-rs
and the raw log), never through the sink under test.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable, Field

from deltasink import (
    AlreadyCommittedError,
    CommitError,
    ConfigurationError,
    DeltaSink,
    DuplicateKeyError,
    InvalidInputError,
    InvalidKeyError,
    InvalidVersionError,
    KeyColumnError,
    MergeSpec,
    SchemaMismatchError,
    StorageError,
    TableDefinitionError,
    TableSpec,
    checks,
)
from deltasink._faults import FaultInjected, armed
from tests import support

UPSERT = MergeSpec(keys=["id"])
APPEND = MergeSpec(mode="append")


@dataclass
class Harness:
    """How a backend's tests make sinks and batches.

    Attributes:
        target: Target table location (absent at the start).
        app_id: The writer's app id.
        make_batch: ``ids -> batch`` in the backend's input type, rows
            ``{"id": i, "value": f"v{i}"}``.
        sink_kwargs: Extra ``DeltaSink`` arguments the backend needs.
    """

    target: str
    app_id: str
    make_batch: Callable[[list[int]], Any]
    sink_kwargs: dict[str, Any] = field(default_factory=dict)
    #: An Arrow table in the backend's input type (Spark harnesses: a DataFrame).
    make_table: Callable[[pa.Table], Any] = field(default=lambda table: table)

    @property
    def coalesce(self) -> bool:
        return bool(self.sink_kwargs.get("coalesce", True))

    def sink(self, merge: MergeSpec | None = UPSERT, **kwargs: Any) -> DeltaSink:
        return DeltaSink(self.target, self.app_id, merge, **self.sink_kwargs, **kwargs)

    def batch(self, *ids: int) -> Any:
        return self.make_batch(list(ids))

    def rows(self, *rows: tuple[int | None, str, str]) -> Any:
        """A batch of ``(id, value, note)`` rows."""
        ids, values, notes = (list(c) for c in zip(*rows, strict=True)) if rows else ([], [], [])
        table = pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "value": pa.array(values, pa.string()),
                "note": pa.array(notes, pa.string()),
            }
        )
        return self.make_table(table)

    def float_rows(self, *rows: tuple[float, str, str]) -> Any:
        """A batch of ``(id, value, note)`` rows with a double ``id`` key."""
        ids, values, notes = (list(c) for c in zip(*rows, strict=True))
        table = pa.table(
            {
                "id": pa.array(ids, pa.float64()),
                "value": pa.array(values, pa.string()),
                "note": pa.array(notes, pa.string()),
            }
        )
        return self.make_table(table)

    def contents(self) -> list[tuple[Any, ...]]:  # nulls last
        """The target's ``(id, value, note)`` rows, by id."""
        return [(r["id"], r["value"], r.get("note")) for r in support.rows(self.target)]

    @property
    def staging(self) -> str:
        return self.sink().staging

    def ids(self) -> list[int]:
        return support.ids(self.target)

    def marker(self) -> int | None:
        return support.marker(self.target, self.app_id)


def spark_tables(session: Any) -> Callable[[pa.Table], Any]:
    """``Harness.make_table`` for a Spark session: a DataFrame of the table's rows with
    its schema (Spark Connect cannot create one from an empty Arrow table)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    def make(table: pa.Table) -> Any:
        return session.createDataFrame(table.to_pylist(), from_arrow_schema(table.schema))

    return make


def spark_harness(session: Any, target: str, app_id: str, **sink_kwargs: Any) -> Harness:
    """The contract's harness on the spark engine over ``session`` (classic or Spark
    Connect): batches of ``(id long, value string)`` rows, tables with their schema."""

    def make_batch(ids: list[int]) -> Any:
        return session.createDataFrame([(i, f"v{i}") for i in ids], "id long, value string")

    return Harness(
        target=target,
        app_id=app_id,
        make_batch=make_batch,
        make_table=spark_tables(session),
        sink_kwargs={"engine": "spark", "spark": session, **sink_kwargs},
    )


def fail_when_publishing(version: int, exc: BaseException) -> Callable[..., None]:
    """A fault action failing every publish attempt that includes ``version``."""

    def _raise(versions: list[int]) -> None:
        if version in versions:
            raise exc

    return _raise


def _fail_with(exc: BaseException) -> Callable[[], None]:
    def _raise() -> None:
        raise exc

    return _raise


def crash_after_the_target_commit(sink: DeltaSink, version: int) -> None:
    """``sink.commit(version)`` failing right after the target commit (before the
    staging clean-up), as a crash there would leave it."""
    with (
        contextlib.suppress(CommitError, FaultInjected),
        armed("publish.after_target_commit", "raise"),
    ):
        sink.commit(version)


class SinkContract:
    """SPEC scenarios 1-12 plus the basic invariants, for one backend."""

    # -- SPEC scenarios -----------------------------------------------------------

    def test_1_notify_a_middle_checkpoint(self, harness: Harness) -> None:
        sink = harness.sink()
        for version, value in enumerate((42, 43, 44)):
            sink.pre_commit(harness.batch(value), version)
        report = sink.commit(1)
        assert report.committed_versions == [0, 1]
        assert harness.ids() == [42, 43]
        assert harness.marker() == 1
        assert sink.status().pending_versions == [2]
        assert support.staged_versions(sink.staging) == [2]

    def test_2_fail_before_notify(self, harness: Harness) -> None:
        sink = harness.sink()
        sink.pre_commit(harness.batch(42), 0)
        sink.pre_commit(harness.batch(43), 1)
        with (
            armed("stage.after_files", _fail_with(OSError("read-only file system"))),
            pytest.raises(StorageError, match="read-only") as raised,
        ):
            sink.pre_commit(harness.batch(44), 2)
        assert isinstance(raised.value.__cause__, OSError)  # the storage's own error
        assert harness.ids() == []  # nothing visible in the target
        assert support.staged_versions(sink.staging) == [0, 1]  # v2 not half-staged
        del sink  # the crash

        report = harness.sink().recover()
        assert report.committed_versions == [0, 1]
        assert harness.ids() == [42, 43]
        assert harness.marker() == 1
        assert support.staged_versions(harness.staging) == []
        assert not any("=2/" in f for f in support.staged_files_on_disk(harness.staging))

    def test_3_commit_keeps_failing_during_recovery(
        self, harness: Harness, caplog: pytest.LogCaptureFixture
    ) -> None:
        harness.sink().write(harness.batch(41), 0)
        now = [time.time()]
        sink = harness.sink(
            transaction_timeout=60, ignore_failures_after_timeout=True, clock=lambda: now[0]
        )
        sink.pre_commit(harness.batch(42), 1)
        boom = _fail_with(OSError("target unavailable"))
        with armed("commit.before_publish", boom), pytest.raises(CommitError) as info:
            sink.recover()  # younger than the timeout: the failure is raised
        assert info.value.version == 1
        assert sink.status().pending_versions == [1]

        strict = harness.sink(transaction_timeout=60, clock=lambda: now[0] + 3600)
        with armed("commit.before_publish", boom), pytest.raises(CommitError):
            strict.recover()  # without the flag it always raises, however old
        assert strict.status().pending_versions == [1]

        now[0] += 3600
        sink = harness.sink(  # each recovery is a restarted process: a new sink
            transaction_timeout=60, ignore_failures_after_timeout=True, clock=lambda: now[0]
        )
        with caplog.at_level(logging.WARNING, "deltasink"), armed("commit.before_publish", boom):
            report = sink.recover()
        assert report.abandoned_versions == [1]
        assert any("abandoned" in r.getMessage() and "1" in r.getMessage() for r in caplog.records)
        assert sink.status().pending_versions == []
        assert harness.ids() == [41]  # committed data untouched, v1 never applied
        assert harness.marker() == 0

    def test_4_skipped_notifications_subsumed(self, harness: Harness) -> None:
        sink = harness.sink()
        for version in (1, 2, 3):
            sink.pre_commit(harness.batch(version * 10), version)
        report = sink.commit(3)
        assert report.committed_versions == [1, 2, 3]
        assert harness.ids() == [10, 20, 30]
        commits = support.txn_commits(harness.target, harness.app_id)
        if harness.coalesce:
            # one target commit applies all three, with the marker of the highest
            assert list(commits) == [3]
            assert report.results[0].versions == (1, 2, 3)
        else:
            # each version is its own target commit, in ascending order
            assert sorted(commits) == [1, 2, 3]
            assert commits[1][0] < commits[2][0] < commits[3][0]

    def test_5_delayed_notification(self, harness: Harness) -> None:
        sink = harness.sink()
        for version in (1, 2, 3):
            sink.pre_commit(harness.batch(version * 10), version)
        assert sink.commit(1).committed_versions == [1]
        assert harness.ids() == [10]
        assert sink.status().pending_versions == [2, 3]

    def test_6_nothing_pending_is_a_noop(self, harness: Harness) -> None:
        sink = harness.sink()
        report = sink.commit(5)
        assert report.results == ()
        assert not support.exists(harness.target)
        sink.write(harness.batch(1), 0)
        before = support.table_version(harness.target)
        assert sink.commit(7).results == ()
        assert support.table_version(harness.target) == before

    def test_7_ordered_failure_stops_at_the_failed_version(self, harness: Harness) -> None:
        sink = harness.sink()
        for version in (1, 2, 3):
            sink.pre_commit(harness.batch(version * 10), version)
        with (
            armed("commit.before_publish", fail_when_publishing(2, OSError("disk full"))),
            pytest.raises(CommitError, match="disk full") as info,
        ):
            sink.commit(3)
        assert info.value.version == 2
        assert info.value.report.committed_versions == [1]  # type: ignore[attr-defined]
        assert harness.ids() == [10]
        assert harness.marker() == 1
        assert sink.status().pending_versions == [2, 3]
        assert sink.recover().committed_versions == [2, 3]
        assert harness.ids() == [10, 20, 30]

    def test_8_timeout_warning(self, harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
        sink = harness.sink()
        sink.pre_commit(harness.batch(1), 4)
        staged_at = sink.status().pending[0].staged_at.timestamp()
        watcher = harness.sink(
            transaction_timeout=100, timeout_warning_ratio=0.5, clock=lambda: staged_at + 75
        )
        with caplog.at_level(logging.WARNING, "deltasink"):
            watcher.commit(3)  # nothing ≤ 3 to commit, but v4 is old: warn
        messages = [r.getMessage() for r in caplog.records]
        assert any(harness.app_id in m and "version 4" in m and "75.0 s" in m for m in messages), (
            messages
        )
        caplog.clear()
        young = harness.sink(
            transaction_timeout=100, timeout_warning_ratio=0.5, clock=lambda: staged_at + 10
        )
        with caplog.at_level(logging.WARNING, "deltasink"):
            young.commit(3)
        assert caplog.records == []

    def test_9_duplicates(self, harness: Harness) -> None:
        sink = harness.sink(APPEND)
        assert sink.pre_commit(harness.batch(1, 2), 0).state == "staged"
        assert sink.pre_commit(harness.batch(1, 2), 0).state == "duplicate"
        assert support.staged_versions(sink.staging) == [0]
        first = sink.commit(0)
        delta_version = support.table_version(harness.target)
        second = sink.commit(0)
        assert first.committed_versions == [0]
        assert second.results == ()
        assert support.table_version(harness.target) == delta_version  # same Delta version
        assert sink.pre_commit(harness.batch(1, 2), 0).state == "already_committed"
        assert support.staged_versions(sink.staging) == []
        assert harness.ids() == [1, 2]  # appended once

    def test_10_end_of_input_commits_everything(self, harness: Harness) -> None:
        sink = harness.sink()
        for version in range(4):
            sink.pre_commit(harness.batch(version), version)
        report = sink.recover()  # the batch job's last step
        assert report.committed_versions == [0, 1, 2, 3]
        assert harness.ids() == [0, 1, 2, 3]
        assert sink.status().pending_versions == []

    def test_11_crash_after_sink_commit_before_source_progress(
        self, harness: Harness, tmp_path: Path
    ) -> None:
        source = SourceJob(harness, tmp_path / "offsets.txt", [[1, 2], [3], [4, 5]])
        with pytest.raises(Crash):
            source.run(progress_before_commit=False, crash_at=1)
        assert source.offset() == 1  # batch 1 committed, its progress not recorded
        assert harness.ids() == [1, 2, 3]
        source.run(progress_before_commit=False)  # restart: batch 1 replayed as version 1
        assert harness.ids() == [1, 2, 3, 4, 5]  # appended exactly once
        assert harness.marker() == 2

    def test_12_crash_after_source_progress_before_sink_commit(
        self, harness: Harness, tmp_path: Path
    ) -> None:
        source = SourceJob(harness, tmp_path / "offsets.txt", [[1, 2], [3], [4, 5]])
        with pytest.raises(Crash):
            source.run(progress_before_commit=True, crash_at=1)
        assert source.offset() == 2  # batch 1's progress is recorded ...
        assert harness.ids() == [1, 2]  # ... but it is not committed
        source.run(progress_before_commit=True)  # restart: recover() commits batch 1 first
        assert harness.ids() == [1, 2, 3, 4, 5]
        assert harness.marker() == 2

    # -- invariants ---------------------------------------------------------------

    def test_marker_is_in_the_same_commit_as_the_data(self, harness: Harness) -> None:
        sink = harness.sink()
        sink.write(harness.batch(1, 2), 0)
        sink.write(harness.batch(2, 3), 1)
        commits = support.log_commits(harness.target)
        for version, delta_versions in support.txn_commits(harness.target, harness.app_id).items():
            assert len(delta_versions) == 1, f"version {version} marker in {delta_versions}"
            actions = commits[delta_versions[0]]
            assert any("add" in a for a in actions), f"no data next to the marker of {version}"

    def test_version_going_backwards_is_refused(self, harness: Harness) -> None:
        sink = harness.sink()
        sink.pre_commit(harness.batch(1), 5)
        with pytest.raises(InvalidVersionError, match="goes backwards"):
            sink.pre_commit(harness.batch(2), 3)
        assert support.staged_versions(sink.staging) == [5]

    def test_a_stale_version_is_skipped_with_a_warning_or_refused(
        self, harness: Harness, caplog: pytest.LogCaptureFixture
    ) -> None:
        sink = harness.sink()
        sink.write(harness.batch(1), 0)
        sink.write(harness.batch(2), 1)
        delta_version = support.table_version(harness.target)
        with caplog.at_level(logging.WARNING, "deltasink"):
            replay = sink.write(harness.batch(2), 1)  # the last one again: normal, silent
        assert (replay.results, replay.committed_version) == ((), 1)
        assert [r.getMessage() for r in caplog.records] == []
        with caplog.at_level(logging.WARNING, "deltasink"):
            stale = sink.write(harness.batch(9), 0)
        assert (stale.results, stale.committed_version) == ((), 1)
        warnings = [r.getMessage() for r in caplog.records]
        assert len(warnings) == 1, warnings
        assert "version 0" in warnings[0], warnings
        assert "below the committed version 1" in warnings[0], warnings
        strict = harness.sink(on_stale="raise")
        with pytest.raises(AlreadyCommittedError, match="below the committed version 1"):
            strict.pre_commit(harness.batch(9), 0)
        with pytest.raises(AlreadyCommittedError, match="nothing was written"):
            strict.write(harness.batch(9), 0)
        assert strict.write(harness.batch(2), 1).committed_versions == []  # replay: fine
        assert harness.ids() == [1, 2]
        assert support.table_version(harness.target) == delta_version
        assert support.staged_versions(sink.staging) == []
        with pytest.raises(ConfigurationError, match="on_stale"):
            harness.sink(on_stale="ignore")

    def test_abort_then_restage(self, harness: Harness) -> None:
        sink = harness.sink()
        sink.pre_commit(harness.batch(1), 0)
        sink.pre_commit(harness.batch(2), 1)
        assert sink.abort(1) is True
        assert sink.abort(1) is False
        assert sink.status().pending_versions == [0]
        sink.pre_commit(harness.batch(3), 1)
        sink.commit(1)
        assert harness.ids() == [1, 3]

    def test_empty_batch_advances_the_marker(self, harness: Harness) -> None:
        sink = harness.sink()
        sink.write(harness.batch(1), 0)
        sink.write(harness.batch(), 1)
        assert harness.marker() == 1
        assert harness.ids() == [1]
        assert sink.status().pending_versions == []

    # -- the target's definition (TableSpec) ----------------------------------------

    def test_table_spec_defines_the_target_it_creates(self, harness: Harness) -> None:
        spec = TableSpec(
            partition_by=["value"],
            properties={"delta.logRetentionDuration": "interval 60 days"},
            comment="orders, exactly once",
        )
        harness.sink(table=spec).write(harness.batch(1, 2), 0)
        meta = DeltaTable(harness.target).metadata()
        assert list(meta.partition_columns) == ["value"]
        assert meta.configuration["delta.logRetentionDuration"] == "interval 60 days"
        assert meta.description == "orders, exactly once"
        assert (harness.ids(), harness.marker()) == ([1, 2], 0)
        harness.sink(table=spec).write(harness.batch(2, 3), 1)  # a later writer agrees
        assert (harness.ids(), harness.marker()) == ([1, 2, 3], 1)
        assert list(DeltaTable(harness.target).metadata().partition_columns) == ["value"]

    def test_a_target_contradicting_the_table_spec_is_refused_before_any_write(
        self, harness: Harness
    ) -> None:
        harness.sink().write(harness.batch(1), 0)  # created without a spec
        before = support.table_version(harness.target)
        staged = support.log_commits(harness.staging) if support.exists(harness.staging) else {}
        contradictions = [
            (TableSpec(partition_by=["value"]), r"partitioned by \[\], the spec says \['value'\]"),
            (
                TableSpec(properties={"delta.enableChangeDataFeed": "true"}),
                r"property delta.enableChangeDataFeed=None, the spec says 'true'",
            ),
            (TableSpec(comment="orders"), r"comment None, the spec says 'orders'"),
        ]
        for spec, message in contradictions:
            sink = harness.sink(table=spec)
            with pytest.raises(TableDefinitionError, match=message):
                sink.write(harness.batch(2), 1)
            with pytest.raises(TableDefinitionError):
                sink.pre_commit(harness.batch(2), 1)
        assert support.table_version(harness.target) == before
        after = support.log_commits(harness.staging) if support.exists(harness.staging) else {}
        assert after.keys() == staged.keys()  # nothing staged either
        assert (harness.ids(), harness.marker()) == ([1], 0)

    def test_a_first_batch_without_the_partition_column_creates_nothing(
        self, harness: Harness
    ) -> None:
        sink = harness.sink(table=TableSpec(partition_by=["day"]))
        with pytest.raises(TableDefinitionError, match=r"names \['day'\] but the batch"):
            sink.write(harness.batch(1), 0)
        assert not support.exists(harness.target)
        assert support.staged_versions(sink.staging) == []

    # -- merge shapes ---------------------------------------------------------------

    def test_update_columns_update_only_those_columns_one_commit_per_version(
        self, harness: Harness
    ) -> None:
        spec = MergeSpec(keys=["id"], update_columns=["value"])
        sink = harness.sink(spec)
        sink.write(harness.rows((1, "a", "n1")), 0)
        sink.pre_commit(harness.rows((1, "b", "n2"), (2, "c", "n3")), 1)
        sink.pre_commit(harness.rows((2, "d", "n4"), (3, "e", "n5")), 2)
        report = sink.commit(2)
        assert report.committed_versions == [1, 2]
        # matched rows: only `value`; inserted rows (2 by v1, 3 by v2): every column
        expected = [(1, "b", "n1"), (2, "d", "n3"), (3, "e", "n5")]
        assert harness.contents() == expected
        assert harness.marker() == 2
        # never coalesced: one target commit per version, whatever the cadence
        assert sorted(support.txn_commits(harness.target, harness.app_id)) == [0, 1, 2]
        # a replay of a committed version is a no-op
        assert sink.write(harness.rows((1, "zz", "zz")), 1).committed_versions == []
        assert harness.contents() == expected

        # a crash right after the target commit: recovery gives the same result
        sink.pre_commit(harness.rows((1, "f", "n6"), (4, "g", "n7")), 3)
        crash_after_the_target_commit(sink, 3)
        harness.sink(spec).recover()
        assert harness.contents() == [
            (1, "f", "n1"),
            (2, "d", "n3"),
            (3, "e", "n5"),
            (4, "g", "n7"),
        ]
        assert harness.marker() == 3
        assert support.staged_versions(harness.staging) == []

    def test_except_columns_leave_those_columns_alone(self, harness: Harness) -> None:
        spec = MergeSpec(keys=["id"], except_columns=["note"])
        sink = harness.sink(spec)
        sink.write(harness.rows((1, "a", "n1"), (2, "b", "n2")), 0)
        sink.pre_commit(harness.rows((1, "c", "n3")), 1)
        sink.pre_commit(harness.rows((1, "d", "n4"), (3, "e", "n5")), 2)
        assert sink.recover().committed_versions == [1, 2]
        assert harness.contents() == [(1, "d", "n1"), (2, "b", "n2"), (3, "e", "n5")]
        assert harness.marker() == 2

    def test_update_columns_missing_from_the_batch_is_refused_before_writing(
        self, harness: Harness
    ) -> None:
        sink = harness.sink(MergeSpec(keys=["id"], update_columns=["note"]))
        with pytest.raises(SchemaMismatchError, match=r"update_columns names \['note'\], missing"):
            sink.write(harness.batch(1), 0)
        assert not support.exists(harness.target)
        assert support.staged_versions(sink.staging) == []

    def test_delete_rows_absent_from_each_version(self, harness: Harness) -> None:
        spec = MergeSpec(
            keys=["id"],
            when_not_matched_by_source="delete",
            not_matched_by_source_condition="t.note = 'x'",
        )
        sink = harness.sink(spec)
        sink.write(harness.rows((1, "a", "x"), (2, "b", "x"), (3, "c", "keep")), 0)
        sink.pre_commit(harness.rows((1, "a1", "x")), 1)
        sink.pre_commit(harness.rows((2, "b2", "x"), (4, "d", "x")), 2)
        assert sink.commit(2).committed_versions == [1, 2]
        # v1 deletes 2; v2 (alone defining the survivors) deletes 1 and inserts 2 again;
        # 3 fails the condition and stays
        expected = [(2, "b2", "x"), (3, "c", "keep"), (4, "d", "x")]
        assert harness.contents() == expected
        assert sorted(support.txn_commits(harness.target, harness.app_id)) == [0, 1, 2]
        assert sink.write(harness.rows((9, "z", "x")), 2).committed_versions == []  # replay
        assert harness.contents() == expected

        sink.pre_commit(harness.rows((4, "d3", "x")), 3)
        crash_after_the_target_commit(sink, 3)
        harness.sink(spec).recover()
        assert harness.contents() == [(3, "c", "keep"), (4, "d3", "x")]
        assert harness.marker() == 3

        harness.sink(spec).write(harness.rows(), 4)  # an empty batch: every 'x' row goes
        assert harness.contents() == [(3, "c", "keep")]
        assert harness.marker() == 4

    def test_a_bad_not_matched_by_source_condition_is_refused_before_writing(
        self, harness: Harness
    ) -> None:
        harness.sink(MergeSpec(keys=["id"])).write(harness.rows((1, "a", "x")), 0)
        spec = MergeSpec(
            keys=["id"],
            when_not_matched_by_source="delete",
            not_matched_by_source_condition="t.nope = 'x'",
        )
        sink = DeltaSink(harness.target, "sync", spec, **harness.sink_kwargs)
        with pytest.raises(InvalidInputError, match="not_matched_by_source_condition"):
            sink.write(harness.rows((2, "b", "x")), 0)
        assert support.marker(harness.target, "sync") is None
        assert support.staged_versions(sink.staging) == []
        assert harness.contents() == [(1, "a", "x")]

    def test_replace_by_reloads_each_slice_exactly_once(self, harness: Harness) -> None:
        spec = MergeSpec(mode="replace", replace_by=["note"])
        sink = harness.sink(spec)
        sink.write(harness.rows((1, "a", "d1"), (2, "b", "d1"), (3, "c", "d2")), 0)
        sink.pre_commit(harness.rows((4, "e", "d1")), 1)  # d1 reloaded: 1 and 2 vanish
        sink.pre_commit(harness.rows((5, "f", "d2"), (6, "g", "d3")), 2)
        assert sink.commit(2).committed_versions == [1, 2]
        expected = [(4, "e", "d1"), (5, "f", "d2"), (6, "g", "d3")]
        assert harness.contents() == expected
        assert sorted(support.txn_commits(harness.target, harness.app_id)) == [0, 1, 2]
        assert sink.write(harness.rows((9, "z", "d1")), 1).committed_versions == []  # replay
        assert harness.contents() == expected

        sink.pre_commit(harness.rows((7, "h", "d1"), (7, "h", "d1")), 3)  # duplicates kept
        crash_after_the_target_commit(sink, 3)
        harness.sink(spec).recover()
        expected = [(5, "f", "d2"), (6, "g", "d3"), (7, "h", "d1"), (7, "h", "d1")]
        assert harness.contents() == expected
        assert harness.marker() == 3
        harness.sink(spec).write(harness.rows(), 4)  # an empty batch replaces nothing
        assert harness.contents() == expected
        assert harness.marker() == 4

    def test_replace_where_replaces_the_rows_it_selects(self, harness: Harness) -> None:
        other = DeltaSink(harness.target, "other", APPEND, **harness.sink_kwargs)
        other.write(harness.rows((500, "q", "d2")), 0)
        spec = MergeSpec(mode="replace", replace_where="note = 'd1'")
        sink = harness.sink(spec)
        with pytest.raises(InvalidInputError, match=r"do not satisfy MergeSpec\.replace_where"):
            sink.write(harness.rows((1, "a", "d1"), (2, "b", "d2")), 0)
        assert harness.marker() is None
        assert support.staged_versions(sink.staging) == []
        sink.write(harness.rows((1, "a", "d1")), 0)
        sink.write(harness.rows((2, "b", "d1")), 1)
        assert harness.contents() == [(2, "b", "d1"), (500, "q", "d2")]
        sink.write(harness.rows(), 2)  # an empty batch empties the slice
        assert harness.contents() == [(500, "q", "d2")]
        assert harness.marker() == 2

    def test_null_safe_keys_match_null_with_null(self, harness: Harness) -> None:
        spec = MergeSpec(keys=["id"], null_safe_keys=True)
        sink = harness.sink(spec)
        sink.write(harness.rows((None, "a", "n1"), (1, "b", "n1")), 0)
        sink.pre_commit(harness.rows((None, "c", "n2")), 1)
        sink.pre_commit(harness.rows((None, "d", "n3"), (2, "e", "n3")), 2)
        assert sink.commit(2).committed_versions == [1, 2]
        expected = [(1, "b", "n1"), (2, "e", "n3"), (None, "d", "n3")]  # one null-key row
        assert harness.contents() == expected
        assert harness.marker() == 2
        assert sink.write(harness.rows((None, "z", "z")), 1).committed_versions == []
        assert harness.contents() == expected

        sink.pre_commit(harness.rows((None, "f", "n4")), 3)
        crash_after_the_target_commit(sink, 3)
        harness.sink(spec).recover()
        assert harness.contents() == [(1, "b", "n1"), (2, "e", "n3"), (None, "f", "n4")]
        assert harness.marker() == 3
        with pytest.raises(DuplicateKeyError):
            sink.write(harness.rows((None, "g", "x"), (None, "h", "y")), 4)
        with pytest.raises(KeyColumnError, match="is null"):
            harness.sink(MergeSpec(keys=["id"])).write(harness.rows((None, "i", "x")), 4)
        assert harness.marker() == 3

    def test_target_predicate_prunes_and_refuses_rows_outside_it(self, harness: Harness) -> None:
        harness.sink(MergeSpec(keys=["id"])).write(harness.rows((1, "a", "d1")), 0)
        spec = MergeSpec(keys=["id"], target_predicate="t.note >= 'd2'")
        sink = DeltaSink(harness.target, "recent", spec, **harness.sink_kwargs)
        sink.write(harness.rows((2, "b", "d2"), (3, "c", "d3")), 0)
        sink.pre_commit(harness.rows((2, "bb", "d2")), 1)
        sink.pre_commit(harness.rows((3, "cc", "d3"), (4, "d", "d4")), 2)
        assert sink.commit(2).committed_versions == [1, 2]
        expected = [(1, "a", "d1"), (2, "bb", "d2"), (3, "cc", "d3"), (4, "d", "d4")]
        assert harness.contents() == expected
        with pytest.raises(InvalidInputError, match=r"1 row\(s\) of the batch do not satisfy"):
            sink.write(harness.rows((1, "x", "d1"), (5, "e", "d5")), 3)  # 1 lies outside
        assert support.marker(harness.target, "recent") == 2
        assert support.staged_versions(sink.staging) == []
        assert harness.contents() == expected

    def test_scd2_keeps_history_exactly_once_late_rows_and_deletes_included(
        self, harness: Harness
    ) -> None:
        spec = MergeSpec(mode="scd2", keys=["id"], sequence_by="note", delete_when="value = 'DEL'")
        sink = harness.sink(spec)

        def history() -> list[tuple[Any, ...]]:
            rows = support.rows(harness.target)
            return sorted(
                (r["id"], r["value"], r["note"], r["valid_from"], r["valid_to"], r["is_current"])
                for r in rows
            )

        sink.write(harness.rows((1, "a", "n1"), (2, "b", "n1")), 0)
        sink.pre_commit(harness.rows((1, "b", "n3")), 1)
        # v2: a late row of 1, a delete of 2, a delete of a key never seen (tombstone)
        sink.pre_commit(harness.rows((1, "late", "n2"), (2, "DEL", "n2"), (3, "DEL", "n5")), 2)
        assert sink.commit(2).committed_versions == [1, 2]
        expected = [
            (1, "a", "n1", "n1", "n2", False),
            (1, "b", "n3", "n3", None, True),
            (1, "late", "n2", "n2", "n3", False),
            (2, "b", "n1", "n1", "n2", False),
            (3, None, "n5", "n5", "n5", False),
        ]
        assert history() == expected
        assert harness.marker() == 2
        assert sink.write(harness.rows((1, "zz", "n9")), 1).committed_versions == []  # replay
        assert history() == expected

        # an older row of 3 arrives after its delete: it ends at the delete
        sink.pre_commit(harness.rows((3, "c", "n4")), 3)
        crash_after_the_target_commit(sink, 3)
        harness.sink(spec).recover()
        expected[-1] = (3, "c", "n4", "n4", "n5", False)
        assert history() == expected
        assert harness.marker() == 3
        assert support.staged_versions(harness.staging) == []

        with pytest.raises(DuplicateKeyError, match="one event per key and sequence_by"):
            sink.write(harness.rows((1, "x", "n7"), (1, "y", "n7")), 4)
        assert harness.marker() == 3
        assert history() == expected

    def test_user_predicates_reach_the_engine_parsed_and_reemitted(self, harness: Harness) -> None:
        """Spark SQL string escapes and comments in every predicate: each engine gets the
        parsed expression re-emitted for its own parser (delta-rs reads ``'it\\'s'``
        as an unterminated string; a ``--`` comment spliced into a larger expression
        swallows the rest of it)."""
        spec = MergeSpec(
            keys=["id"],
            delete_when="note = 'it\\'s' -- a delete, not ) OR (1=1",
            target_predicate="t.value <> 'x\\'y' /* no such value */",
        )
        sink = harness.sink(spec)
        sink.write(harness.rows((1, "a", "n"), (2, "b", "n")), 0)
        sink.write(harness.rows((1, "a2", "it's"), (3, "c", "n")), 1)  # deletes 1
        assert harness.contents() == [(2, "b", "n"), (3, "c", "n")]
        assert harness.marker() == 1

        sync = MergeSpec(
            keys=["id"],
            when_not_matched_by_source="delete",
            not_matched_by_source_condition="t.note = 'it\\'s'",
        )
        synced = DeltaSink(harness.target, "sync", sync, **harness.sink_kwargs)
        synced.write(harness.rows((4, "d", "it's")), 0)  # 2 and 3 fail the condition
        synced.write(harness.rows((5, "e", "n")), 1)  # 4 is absent: deleted
        assert harness.contents() == [(2, "b", "n"), (3, "c", "n"), (5, "e", "n")]

        reload = MergeSpec(mode="replace", replace_where="note = 'it\\'s'")
        replaced = DeltaSink(harness.target, "reload", reload, **harness.sink_kwargs)
        replaced.write(harness.rows((6, "f", "it's")), 0)
        replaced.write(harness.rows((7, "g", "it's")), 1)  # 6 is in the slice: replaced
        assert harness.contents() == [(2, "b", "n"), (3, "c", "n"), (5, "e", "n"), (7, "g", "it's")]
        assert support.marker(harness.target, "sync") == 1
        assert support.marker(harness.target, "reload") == 1

    def test_injected_predicates_are_refused_before_anything_is_written(
        self, harness: Harness
    ) -> None:
        harness.sink().write(harness.rows((1, "a", "x"), (2, "b", "y")), 0)
        forms = [
            "note = 'x') OR (1=1",  # the stray parentheses of the issue
            "note = 'x'; DELETE FROM t",
            "note = 'x' /* OR 1=1",
            "note = 'x', 1 = 1",
            "1 + 1",
            "note IN (SELECT note FROM t)",
        ]
        for form in forms:
            with pytest.raises(ConfigurationError, match=r"MergeSpec\.delete_when"):
                MergeSpec(keys=["id"], delete_when=form)
            with pytest.raises(ConfigurationError, match=r"MergeSpec\.target_predicate"):
                MergeSpec(keys=["id"], target_predicate=form)
            with pytest.raises(ConfigurationError, match=r"MergeSpec\.replace_where"):
                MergeSpec(mode="replace", replace_where=form)
            with pytest.raises(ConfigurationError, match=r"checks\.expect"):
                checks.expect(form)
        # A predicate that parses but names no column of the batch: refused at the
        # first batch by the engine's analysis, nothing written.
        sink = DeltaSink(
            harness.target,
            "unknown",
            MergeSpec(keys=["id"], delete_when="nosuchcol = 'D'"),
            **harness.sink_kwargs,
        )
        with pytest.raises(InvalidInputError, match=r"MergeSpec\.delete_when .nosuchcol = 'D'. is"):
            sink.write(harness.rows((1, "z", "x")), 0)
        assert support.marker(harness.target, "unknown") is None
        assert support.staged_versions(sink.staging) == []
        assert harness.contents() == [(1, "a", "x"), (2, "b", "y")]

    def test_a_broken_check_is_a_configuration_error_not_a_quarantine(
        self, harness: Harness, caplog: pytest.LogCaptureFixture
    ) -> None:
        for broken in ([1], [checks.expect], [checks.no_nulls], checks.no_nulls("id")):
            with pytest.raises(ConfigurationError, match="check"):
                harness.sink(checks=broken)
        for check in (
            checks.expect("nosuchcol > 0"),
            checks.no_nulls("id", "nosuchcol"),
            checks.sql("SELECT * FROM staged JOIN no_such_table USING (id)"),
        ):
            sink = harness.sink(checks=[check])
            with pytest.raises(ConfigurationError, match=r"Nothing was staged|nothing was staged"):
                sink.write(harness.batch(1, 2), 0)
            with pytest.raises(ConfigurationError):
                sink.pre_commit(harness.batch(1, 2), 0)
            status = sink.status()
            assert (status.pending_versions, status.quarantined) == ([], {})
            assert support.staged_versions(sink.staging) == []
            assert harness.marker() is None
        # Only data failing a valid check is quarantined: logged at ERROR, in the report.
        sink = harness.sink(checks=[checks.expect("id < 3")])
        assert sink.foreach_batch(harness.batch(1, 2), 0).committed_versions == [0]
        with caplog.at_level(logging.WARNING, "deltasink"):
            report = sink.foreach_batch(harness.batch(3), 1)
        assert report.quarantined_versions == [1]
        assert report.results[0].message == (
            "check expect('id < 3') failed: returned 1 row(s) (rows not quoted; "
            "DeltaSink(..., check_samples=True) quotes them)"
        )
        (logged,) = [r for r in caplog.records if "is quarantined" in r.getMessage()]
        assert logged.levelno == logging.ERROR
        assert harness.ids() == [1, 2]
        assert harness.marker() == 0
        assert sink.status().quarantined == {1: report.results[0].message}

    def test_scd2_refuses_a_target_without_history_columns_before_writing(
        self, harness: Harness
    ) -> None:
        harness.sink(MergeSpec(keys=["id"])).write(harness.rows((1, "a", "n1")), 0)
        spec = MergeSpec(mode="scd2", keys=["id"], sequence_by="note")
        sink = DeltaSink(harness.target, "history", spec, **harness.sink_kwargs)
        with pytest.raises(SchemaMismatchError, match="has no column 'valid_from'"):
            sink.write(harness.rows((1, "b", "n2")), 0)
        assert support.marker(harness.target, "history") is None
        assert support.staged_versions(sink.staging) == []
        assert harness.contents() == [(1, "a", "n1")]

    # -- accepted means publishable ----------------------------------------------------

    @pytest.mark.parametrize(
        ("mode", "column", "found"),
        [
            ("upsert", "extra", pa.int64()),  # a column the first version did not have
            ("scd2", "extra", pa.int64()),
            ("append", "extra", pa.int64()),
            ("upsert", "n", pa.string()),  # a column changing type
        ],
    )
    def test_a_version_the_pending_ones_leave_no_room_for_is_refused_at_pre_commit(
        self, harness: Harness, mode: str, column: str, found: pa.DataType
    ) -> None:
        # On a new target the first pending version defines the table: a version it
        # leaves no room for is refused now, as one by one (the target created first)
        # refuses it, by the same check; nothing of it is staged.
        spec = pending_spec(mode)
        sink = harness.sink(spec)
        assert sink.pre_commit(harness.make_table(pending_rows(0)), 0).state == "staged"
        second = harness.make_table(pending_rows(1, **{column: found}))
        with pytest.raises(SchemaMismatchError, match=f"column '{column}'") as pending:
            sink.pre_commit(second, 1)
        assert sink.status().pending_versions == [0]
        assert support.staged_versions(sink.staging) == [0]
        assert not support.exists(harness.target)
        one_by_one = DeltaSink(harness.target + "_one", "one", spec, **harness.sink_kwargs)
        one_by_one.write(harness.make_table(pending_rows(0)), 0)
        with pytest.raises(SchemaMismatchError) as committed:
            one_by_one.pre_commit(second, 1)
        # the same check, the same words, plus which schema it was checked against
        same = str(committed.value).replace(harness.target + "_one", "T")
        assert str(pending.value).replace(harness.target, "T") == (
            f"{same} (Checked against the schema T will have once the pending versions "
            f"[0] of app {harness.app_id!r} are published: a staged version "
            "must be publishable. Nothing was staged.)"
        )
        assert (pending.value.column, pending.value.version) == (column, 1)
        assert sink.commit(1).committed_versions == [0]
        assert pending_contents(harness.target) == pending_contents(harness.target + "_one")
        assert harness.marker() == 0
        assert sink.status().pending_versions == []

    def test_pending_versions_evolve_the_schema_a_batch_is_checked_against(
        self, harness: Harness
    ) -> None:
        # With schema_evolution, v1 adds `extra` (long); v2 with `extra` as a string is
        # refused though the target (v0 committed) has no `extra` yet.
        spec = MergeSpec(keys=["id"], schema_evolution=True)
        sink = harness.sink(spec)
        sink.write(harness.make_table(pending_rows(0)), 0)
        sink.pre_commit(harness.make_table(pending_rows(1, extra=pa.int64())), 1)
        with pytest.raises(SchemaMismatchError, match="column 'extra' has type string"):
            sink.pre_commit(harness.make_table(pending_rows(2, extra=pa.string())), 2)
        assert sink.status().pending_versions == [1]
        sink.pre_commit(harness.make_table(pending_rows(2, extra=pa.int32())), 2)
        assert sink.commit(2).committed_versions == [1, 2]
        assert harness.marker() == 2
        assert pending_contents(harness.target) == [
            {"id": 0, "seq": 0, "n": 0, "extra": None},
            {"id": 1, "seq": 1, "n": 1, "extra": 1},
            {"id": 2, "seq": 2, "n": 2, "extra": 2},
        ]

    @pytest.mark.parametrize("mode", ["upsert", "append", "scd2"])
    def test_a_stuck_version_is_refused_by_name_and_adding_the_column_publishes_it(
        self, harness: Harness, mode: str
    ) -> None:
        # Staged by a release that checked against the target alone: coalesced or one by
        # one, v0 is committed and v1 refused with the way out; nothing is lost.
        spec = pending_spec(mode)
        sink = harness.sink(spec)
        sink.pre_commit(harness.make_table(pending_rows(0)), 0)
        stage_as_an_old_release(sink, harness.make_table(pending_rows(1, extra=pa.int64())), 1)
        with pytest.raises(CommitError, match=r"column 'extra'.*sink\.abort\(1\)") as failed:
            sink.commit(1)
        assert isinstance(failed.value.__cause__, SchemaMismatchError)
        assert failed.value.report.committed_versions == [0]
        assert harness.marker() == 0
        assert [f.name for f in DeltaTable(harness.target).schema().fields][:3] == [
            "id",
            "seq",
            "n",
        ]
        with pytest.raises(CommitError, match="ALTER TABLE"):
            harness.sink(spec).recover()
        # a later version could not be published behind it: refused, naming it
        with pytest.raises(SchemaMismatchError, match="Staged version 1 cannot be published"):
            harness.sink(spec).pre_commit(harness.make_table(pending_rows(2)), 2)
        assert sink.status().pending_versions == [1]
        DeltaTable(harness.target).alter.add_columns(Field("extra", "long", nullable=True))
        assert harness.sink(spec).recover().committed_versions == [1]
        assert harness.marker() == 1
        assert sink.status().pending_versions == []
        current = [
            {k: v for k, v in r.items() if k in ("id", "seq", "n", "extra")}
            for r in pending_contents(harness.target)
        ]
        assert current == [
            {"id": 0, "seq": 0, "n": 0, "extra": None},
            {"id": 1, "seq": 1, "n": 1, "extra": 1},
        ]

    def test_a_stuck_version_read_back_aborted_and_sent_again_loses_nothing(
        self, harness: Harness
    ) -> None:
        self.read_back_abort_and_resend(
            harness, "extra", pa.int64(), "column 'extra' .* is not in target"
        )

    def test_a_stuck_changed_type_read_back_aborted_and_sent_again_loses_nothing(
        self, harness: Harness
    ) -> None:
        # Not on the spark engine: its staging table (one Delta schema) refuses a changed
        # type at the staging write (DELTA_FAILED_TO_MERGE_FIELDS), so none gets stuck.
        self.read_back_abort_and_resend(harness, "n", pa.string(), "column 'n' has type string")

    def read_back_abort_and_resend(
        self, harness: Harness, column: str, found: pa.DataType, refusal: str
    ) -> None:
        sink = harness.sink(MergeSpec(keys=["id"]))
        sink.pre_commit(harness.make_table(pending_rows(0)), 0)
        stage_as_an_old_release(sink, harness.make_table(pending_rows(1, **{column: found})), 1)
        with pytest.raises(CommitError, match=f"{refusal}.*_deltasink_version = 1"):
            sink.commit(1)
        # The way out the error names: read its rows, abort it, send it again fixed.
        staged = DeltaTable(sink.staging).to_pyarrow_table(
            filters=[("_deltasink_version", "=", 1)], columns=["id", "seq", "n"]
        )
        fixed = staged.set_column(2, "n", pc.cast(staged.column("n"), pa.int64()))
        assert sink.abort(1) is True
        assert sink.pre_commit(harness.make_table(fixed), 1).state == "staged"
        assert sink.commit(1).committed_versions == [1]
        assert harness.marker() == 1
        assert sink.status().pending_versions == []
        assert pending_contents(harness.target) == [
            {"id": 0, "seq": 0, "n": 0},
            {"id": 1, "seq": 1, "n": 1},
        ]


def pending_spec(mode: str) -> MergeSpec:
    """A MergeSpec of ``mode`` over :func:`pending_rows`."""
    if mode == "append":
        return APPEND
    if mode == "scd2":
        return MergeSpec(mode="scd2", keys=["id"], sequence_by="seq")
    return MergeSpec(keys=["id"])


def pending_rows(i: int, **extra: pa.DataType) -> pa.Table:
    """One row ``(id=i, seq=i, n=i)``, plus a column of each ``extra`` type holding
    ``i`` (``n`` given there changes its type)."""
    columns: dict[str, pa.Array[Any]] = {
        "id": pa.array([i], pa.int64()),
        "seq": pa.array([i], pa.int64()),
        "n": pa.array([i], pa.int64()),
    }
    for name, kind in extra.items():
        value: Any = str(i) if pa.types.is_string(kind) else i
        columns[name] = pa.array([value], kind)
    return pa.table(columns)


def pending_contents(target: str) -> list[dict[str, Any]]:
    """The target's rows by id, columns in table order."""
    return support.rows(target)


def stage_as_an_old_release(sink: DeltaSink, batch: Any, version: int) -> None:
    """``sink.pre_commit(batch, version)`` as releases before "accepted means
    publishable" made it: the batch checked against the target alone, not against the
    versions pending before it (how a version got stuck)."""
    backend: Any = sink._backend
    with pytest.MonkeyPatch.context() as patch:
        if hasattr(backend._fit, "schema_before"):  # the embedded engine
            patch.setattr(backend._fit, "schema_before", lambda v: backend.target.schema())
        else:  # the spark engine
            patch.setattr(backend._fit, "expected", lambda v, target: None)
        assert sink.pre_commit(batch, version).state == "staged"

    def test_float_keys_have_one_rule_in_every_mode(self, harness: Harness) -> None:
        """-0.0 is the key 0.0 (stored as 0.0) and NaN is refused by name, whatever the
        mode and cadence: direct write, pending versions committed together (coalesced
        where the harness coalesces) and a recovered version."""

        def signed(uri: str, *columns: str) -> list[tuple[Any, ...]]:  # -0.0 shows as "-0.0"
            rows = support.rows(uri)
            return sorted((str(r["id"]), *(r[c] for c in columns)) for r in rows)

        def refused(sink: DeltaSink, batch: Any, version: int, error: type[Exception]) -> None:
            marker, table = support.marker(sink.target, sink.app_id), signed(sink.target)
            with pytest.raises(error, match=r"appear more than once|is NaN") as caught:
                sink.write(batch, version)
            assert caught.value.column == "id"
            assert support.marker(sink.target, sink.app_id) == marker
            assert support.staged_versions(sink.staging) == []
            assert signed(sink.target) == table

        nan, rows = float("nan"), harness.float_rows
        upsert = harness.sink(MergeSpec(keys=["id"]))
        upsert.write(rows((1.5, "a", "n1")), 0)  # direct
        upsert.pre_commit(rows((0.0, "b", "n2")), 1)
        upsert.pre_commit(rows((-0.0, "c", "n3"), (1.5, "x", "n3")), 2)
        assert upsert.commit(2).committed_versions == [1, 2]
        assert signed(harness.target, "value") == [("0.0", "c"), ("1.5", "x")]
        upsert.pre_commit(rows((-0.0, "d", "n4")), 3)
        crash_after_the_target_commit(upsert, 3)
        upsert = harness.sink(MergeSpec(keys=["id"]))
        upsert.recover()
        assert signed(harness.target, "value") == [("0.0", "d"), ("1.5", "x")]
        assert harness.marker() == 3
        upsert.write(rows((-0.0, "e", "n5")), 4)  # direct
        assert signed(harness.target, "value") == [("0.0", "e"), ("1.5", "x")]
        refused(upsert, rows((0.0, "f", "n6"), (-0.0, "g", "n6")), 5, DuplicateKeyError)
        refused(upsert, rows((nan, "f", "n6")), 5, InvalidKeyError)
        with pytest.raises(KeyColumnError):  # InvalidKeyError is a KeyColumnError
            upsert.pre_commit(rows((2.0, "f", "n6"), (nan, "g", "n6")), 5)
        assert support.staged_versions(upsert.staging) == []

        # A delete of -0.0 deletes 0.0; sequence_by picks one row of 0.0 and -0.0.
        spec = MergeSpec(keys=["id"], sequence_by="note", delete_when="value = 'DEL'")
        seq = DeltaSink(f"{harness.target}_seq", "seq", spec, **harness.sink_kwargs)
        seq.write(rows((0.0, "a", "n1"), (-0.0, "b", "n2"), (2.0, "c", "n1")), 0)  # creates
        assert signed(seq.target, "value", "note") == [("0.0", "b", "n2"), ("2.0", "c", "n1")]
        seq.pre_commit(rows((-0.0, "c", "n3")), 1)
        seq.pre_commit(rows((0.0, "DEL", "n4"), (-0.0, "d", "n1")), 2)
        assert seq.commit(2).committed_versions == [1, 2]
        assert signed(seq.target, "value") == [("2.0", "c")]
        seq.pre_commit(rows((-0.0, "e", "n5")), 3)
        seq.pre_commit(rows((0.0, "f", "n6")), 4)
        assert seq.commit(4).committed_versions == [3, 4]
        assert signed(seq.target, "value") == [("0.0", "f"), ("2.0", "c")]
        refused(seq, rows((nan, "g", "n9")), 5, InvalidKeyError)

        insert = DeltaSink(
            f"{harness.target}_insert",
            "ins",
            MergeSpec(keys=["id"], mode="insert"),
            **harness.sink_kwargs,
        )
        insert.write(rows((-0.0, "a", "n1")), 0)
        insert.pre_commit(rows((0.0, "b", "n2")), 1)
        insert.pre_commit(rows((-0.0, "c", "n3")), 2)
        assert insert.commit(2).committed_versions == [1, 2]
        assert signed(insert.target, "value") == [("0.0", "a")]
        refused(insert, rows((0.0, "d", "n4"), (-0.0, "e", "n4")), 3, DuplicateKeyError)
        refused(insert, rows((nan, "d", "n4")), 3, InvalidKeyError)

    def test_float_keys_in_scd2_keep_one_current_row(self, harness: Harness) -> None:
        spec = MergeSpec(mode="scd2", keys=["id"], sequence_by="note")
        sink = harness.sink(spec)
        rows = harness.float_rows

        def history() -> list[tuple[Any, ...]]:
            return sorted(
                (str(r["id"]), r["value"], r["note"], r["valid_to"], r["is_current"])
                for r in support.rows(harness.target)
            )

        sink.write(rows((0.0, "a", "n1")), 0)
        sink.write(rows((-0.0, "b", "n2")), 1)  # one by one
        sink.pre_commit(rows((-0.0, "c", "n3")), 2)
        sink.pre_commit(rows((0.0, "d", "n4"), (-0.0, "late", "n0")), 3)
        assert sink.commit(3).committed_versions == [2, 3]
        assert history() == [
            ("0.0", "a", "n1", "n2", False),
            ("0.0", "b", "n2", "n3", False),
            ("0.0", "c", "n3", "n4", False),
            ("0.0", "d", "n4", None, True),
            ("0.0", "late", "n0", "n1", False),
        ]
        assert harness.marker() == 3
        with pytest.raises(DuplicateKeyError, match="one event per key and sequence_by"):
            sink.write(rows((0.0, "x", "n7"), (-0.0, "y", "n7")), 4)
        with pytest.raises(InvalidKeyError, match="'id' is NaN in 1 row"):
            sink.write(rows((float("nan"), "x", "n7")), 4)
        assert harness.marker() == 3
        assert support.staged_versions(harness.staging) == []
        assert len(history()) == 5

    def test_empty_string_partition_values_read_back_as_null_and_still_match(
        self, harness: Harness
    ) -> None:
        """Delta stores an empty-string partition value as null: the rows read back
        with a null ``note``, and upserts (by a key that includes the partition
        column) and replaces of the "" slice still match them: no row is duplicated."""
        layout = TableSpec(partition_by=["note"])
        spec = MergeSpec(keys=["id", "note"])
        sink = harness.sink(spec, table=layout)
        sink.write(harness.rows((1, "a", ""), (2, "b", "x")), 0)  # creates the target
        assert harness.contents() == [(1, "a", None), (2, "b", "x")]
        sink.pre_commit(harness.rows((1, "b", "")), 1)
        sink.pre_commit(harness.rows((1, "c", ""), (3, "c", "")), 2)
        assert sink.commit(2).committed_versions == [1, 2]
        sink.write(harness.rows((1, "d", ""), (3, "d", "")), 3)  # direct
        assert harness.contents() == [(1, "d", None), (2, "b", "x"), (3, "d", None)]
        assert harness.marker() == 3
        insert = DeltaSink(
            harness.target,
            "ins",
            MergeSpec(keys=["id", "note"], mode="insert"),
            **harness.sink_kwargs,
        )
        insert.write(harness.rows((1, "e", ""), (4, "e", "")), 0)
        assert harness.contents() == [(1, "d", None), (2, "b", "x"), (3, "d", None), (4, "e", None)]

        by = DeltaSink(
            f"{harness.target}_by",
            "by",
            MergeSpec(mode="replace", replace_by=["note"]),
            table=layout,
            **harness.sink_kwargs,
        )
        by.write(harness.rows((1, "a", ""), (2, "b", "x")), 0)
        by.write(harness.rows((3, "c", "")), 1)
        by.pre_commit(harness.rows((4, "d", ""), (5, "d", "")), 2)
        assert by.commit(2).committed_versions == [2]
        assert support.rows(by.target) == [
            {"id": 2, "value": "b", "note": "x"},
            {"id": 4, "value": "d", "note": None},
            {"id": 5, "value": "d", "note": None},
        ]
        where = DeltaSink(
            f"{harness.target}_where",
            "where",
            MergeSpec(mode="replace", replace_where="coalesce(note, '') = ''"),
            table=layout,
            **harness.sink_kwargs,
        )
        where.write(harness.rows((1, "a", "")), 0)
        where.write(harness.rows((2, "b", ""), (3, "b", "")), 1)
        assert support.rows(where.target) == [
            {"id": 2, "value": "b", "note": None},
            {"id": 3, "value": "b", "note": None},
        ]
        assert support.marker(where.target, "where") == 1

        spec = MergeSpec(mode="scd2", keys=["id", "note"], sequence_by="value")
        scd2 = DeltaSink(f"{harness.target}_scd2", "h", spec, table=layout, **harness.sink_kwargs)
        scd2.write(harness.rows((1, "a", ""), (2, "a", "x")), 0)
        scd2.write(harness.rows((1, "b", "")), 1)
        scd2.pre_commit(harness.rows((1, "c", "")), 2)
        scd2.pre_commit(harness.rows((1, "d", "")), 3)
        assert scd2.commit(3).committed_versions == [2, 3]
        history = sorted(
            (r["id"], r["note"], r["value"], r["valid_to"], r["is_current"])
            for r in support.rows(scd2.target)
        )
        assert history == [
            (1, None, "a", "b", False),
            (1, None, "b", "c", False),
            (1, None, "c", "d", False),
            (1, None, "d", None, True),
            (2, "x", "a", None, True),
        ]


class Crash(Exception):
    """The simulated death of the job."""


class SourceJob:
    """A minimal source with an offset log, driven the way seed 001 describes:
    pre-commit, then record source progress, then commit."""

    def __init__(self, harness: Harness, offsets: Path, batches: list[list[int]]) -> None:
        self.harness = harness
        self.offsets = offsets
        self.batches = batches

    def offset(self) -> int:
        return int(self.offsets.read_text()) if self.offsets.exists() else 0

    def run(self, *, progress_before_commit: bool, crash_at: int | None = None) -> None:
        """Process the batches from the recorded offset.

        Args:
            progress_before_commit: Record source progress between pre-commit and
                commit (Flink's order: the checkpoint completes, then the sink commits);
                otherwise after the commit.
            crash_at: Die at this version, between the two steps: after progress and
                before the commit (progress first), or after the commit and before
                progress (commit first).
        """
        sink = self.harness.sink(APPEND)
        sink.recover()  # on start: finish whatever the last run staged
        for version in range(self.offset(), len(self.batches)):
            sink.pre_commit(self.harness.batch(*self.batches[version]), version)
            if progress_before_commit:
                self.offsets.write_text(str(version + 1))  # only after pre_commit returned
                if version == crash_at:
                    raise Crash
            sink.commit(version)
            if not progress_before_commit:
                if version == crash_at:
                    raise Crash
                self.offsets.write_text(str(version + 1))
