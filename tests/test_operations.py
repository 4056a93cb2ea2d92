"""Write-audit-publish, post-commit hooks, the ledger and multi-table publish."""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from deltalake import DeltaTable

from deltasink import (
    AlreadyCommittedError,
    CommitError,
    ConfigurationError,
    DeltaSink,
    InvalidInputError,
    MergeSpec,
    QuarantinedError,
    SinkGroup,
    checks,
    hooks,
)
from deltasink.hooks import PostCommit
from deltasink.ops.history import is_compaction
from tests import support

UPSERT = MergeSpec(keys=["id"])


def orders(ids: list[int], amounts: list[float | None] | None = None) -> pa.Table:
    amounts = amounts if amounts is not None else [10.0 * i for i in ids]
    return pa.table({"id": pa.array(ids, pa.int64()), "amount": pa.array(amounts, pa.float64())})


# -- write-audit-publish -----------------------------------------------------------------


def test_a_failing_check_quarantines_and_later_versions_wait(target: str) -> None:
    sink = DeltaSink(target, "wap", UPSERT, checks=[checks.no_nulls("amount")])
    sink.write(orders([1]), 0)
    sink.pre_commit(orders([2], [None]), 1)  # bad: a null amount
    sink.pre_commit(orders([3]), 2)
    report = sink.commit(2)
    assert report.committed_versions == []
    assert report.quarantined_versions == [1]
    assert "no_nulls(amount) failed: null values {'amount': 1}" in (report.results[0].message or "")
    assert support.ids(target) == [1]  # nothing of v1, and v2 waits behind it
    status = sink.status()
    assert status.pending_versions == [1, 2]
    assert status.quarantined == {1: report.results[0].message}
    # still quarantined after a restart, without re-running anything
    again = DeltaSink(target, "wap", UPSERT, checks=[checks.no_nulls("amount")]).recover()
    assert again.quarantined_versions == [1]
    assert support.ids(target) == [1]


def test_restaging_a_quarantined_version_releases_it(target: str) -> None:
    sink = DeltaSink(target, "wap", UPSERT, checks=[checks.no_nulls("amount")])
    sink.pre_commit(orders([1], [None]), 0)
    sink.pre_commit(orders([2]), 1)
    assert sink.commit(1).quarantined_versions == [0]
    fixed = sink.pre_commit(orders([1], [5.0]), 0)  # re-stage with fixed data
    assert fixed.state == "restaged"
    assert sink.status().quarantined == {}
    assert sink.commit(1).committed_versions == [0, 1]
    assert support.rows(target) == [{"id": 1, "amount": 5.0}, {"id": 2, "amount": 20.0}]


def test_aborting_a_quarantined_version_releases_the_rest(target: str) -> None:
    sink = DeltaSink(target, "wap", UPSERT, checks=[checks.row_count_between(1, 10)])
    sink.pre_commit(orders([]), 0)  # empty: fails the row count
    sink.pre_commit(orders([7]), 1)
    assert sink.commit(1).quarantined_versions == [0]
    assert sink.abort(0) is True
    assert sink.status().quarantined == {}
    assert sink.commit(1).committed_versions == [1]
    assert support.ids(target) == [7]


def test_sql_and_expect_checks_run_on_spark_sql(target: str) -> None:
    sink = DeltaSink(
        target,
        "wap",
        UPSERT,
        checks=[
            checks.expect("amount >= 0"),
            checks.sql("SELECT id FROM staged WHERE id > 100", label="ids below 100"),
        ],
    )
    sink.write(orders([1, 2]), 0)
    sink.pre_commit(orders([3, 4], [1.0, -5.0]), 1)
    report = sink.commit(1)
    assert report.quarantined_versions == [1]
    assert report.results[0].message == (
        "check expect('amount >= 0') failed: returned 1 row(s) (rows not quoted; "
        "DeltaSink(..., check_samples=True) quotes them)"
    )
    sink.pre_commit(orders([3, 400]), 1)  # re-staged, but now the id check fails
    report = sink.commit(1)
    assert "ids below 100 failed" in (report.results[0].message or "")
    assert support.ids(target) == [1, 2]


def test_failing_checks_quote_rows_only_when_asked(
    target: str, caplog: pytest.LogCaptureFixture
) -> None:
    secret = pa.table({"id": [1, 1, 2, 3, 4], "email": ["a@x", "a@x", "b@x", "c@x", "d@x"]})
    bad = [checks.expect("email NOT LIKE '%@x'", label="no x mail")]
    quiet = DeltaSink(target, "quiet", MergeSpec(mode="append"), checks=bad)
    with caplog.at_level(logging.WARNING, "deltasink"):
        report = quiet.write(secret, 0)
    assert report.results[0].message == (
        "check no x mail failed: returned 3 or more row(s) (rows not quoted; "
        "DeltaSink(..., check_samples=True) quotes them)"
    )
    stored = DeltaSink(target, "quiet").status().quarantined[0]
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert all("@x" not in text for text in (stored, logged)), (stored, logged)
    dup = DeltaSink(target, "dup", MergeSpec(mode="append"), checks=[checks.unique("email")])
    assert dup.write(secret, 0).results[0].message == (
        "check unique(email) failed: 1 value(s) repeat (rows not quoted; "
        "DeltaSink(..., check_samples=True) quotes them)"
    )
    loud = DeltaSink(target, "loud", MergeSpec(mode="append"), checks=bad, check_samples=True)
    message = loud.write(secret, 0).results[0].message or ""
    assert message.startswith("check no x mail failed: returned rows, e.g. [{'id': 1, 'email'")
    assert message.count("@x") == 3  # at most three rows quoted
    sampled = DeltaSink(
        target,
        "dup2",
        MergeSpec(mode="append"),
        checks=[checks.unique("email")],
        check_samples=True,
    )
    assert sampled.write(secret, 0).results[0].message == (
        "check unique(email) failed: 1 value(s) repeat, e.g. {'email': 'a@x', 'count_all': 2}"
    )
    assert support.ids(target) == []


def test_on_quarantine_raise_stops_a_stream_until_the_version_is_released(
    target: str, caplog: pytest.LogCaptureFixture
) -> None:
    guard = [checks.no_nulls("amount")]
    strict = DeltaSink(target, "stream", UPSERT, checks=guard, on_quarantine="raise")
    strict.foreach_batch(orders([1]), 0)
    reason = "check no_nulls(amount) failed: null values {'amount': 1}"
    for _attempt in range(2):  # the batch, then Spark's replay of it after the restart
        with pytest.raises(QuarantinedError, match="version 1 of app 'stream' is quarantined"):
            strict.foreach_batch(orders([2], [None]), 1)
    with pytest.raises(QuarantinedError) as raised:
        strict.write(orders([2], [None]), 1)
    error = raised.value
    assert (error.version, error.reason, error.app_id) == (1, reason, "stream")
    assert error.report.quarantined_versions == [1]  # type: ignore[attr-defined]
    assert support.ids(target) == [1]
    assert strict.status().quarantined == {1: reason}
    assert strict.abort(1) is True
    strict.foreach_batch(orders([2], [20.0]), 1)  # the fixed batch after the release
    assert support.rows(target) == [{"id": 1, "amount": 10.0}, {"id": 2, "amount": 20.0}]
    lenient = DeltaSink(target, "stream", UPSERT, checks=guard)  # default: continue
    with caplog.at_level(logging.WARNING, "deltasink"):
        lenient.foreach_batch(orders([3], [None]), 2)
    assert lenient.status().quarantined == {2: reason}
    assert any("version 2 is quarantined" in r.getMessage() for r in caplog.records)
    with pytest.raises(ConfigurationError, match="on_quarantine"):
        DeltaSink(target, "stream", UPSERT, on_quarantine="stop")  # type: ignore[arg-type]


def test_row_count_within_compares_with_the_previous_batch(target: str) -> None:
    sink = DeltaSink(target, "wap", UPSERT, checks=[checks.row_count_within(50)])
    sink.write(orders(list(range(10))), 0)  # no previous batch: passes
    assert sink.write(orders(list(range(10, 24))), 1).committed_versions == [1]  # +40%
    report = sink.write(orders(list(range(100, 103))), 2)  # 3 vs 14 rows: -79%
    assert report.quarantined_versions == [2]
    assert "3 rows vs 14 in the previous batch" in (report.results[0].message or "")


def test_custom_checks_and_a_raising_check(target: str) -> None:
    def small_batches(batch: checks.StagedBatch) -> str | None:
        return None if batch.rows <= 2 else f"{batch.rows} rows is too many"

    def broken(batch: checks.StagedBatch) -> bool:
        raise RuntimeError("lookup service down")

    sink = DeltaSink(target, "wap", UPSERT, checks=[small_batches])
    report = sink.write(orders([1, 2, 3]), 0)
    assert report.results[0].message == "check small_batches failed: 3 rows is too many"
    sink.abort(0)
    other = DeltaSink(target, "wap", UPSERT, checks=[broken])
    report = other.write(orders([1]), 1)
    assert report.quarantined_versions == [1]
    assert "a check raised RuntimeError: lookup service down" in (report.results[0].message or "")


def test_checks_see_the_staged_rows_without_system_columns(target: str) -> None:
    seen: list[pa.Table] = []

    def capture(batch: checks.StagedBatch) -> None:
        seen.append(batch.to_arrow())

    spec = MergeSpec(keys=["id"], delete_when="amount < 0")
    DeltaSink(target, "wap", spec, checks=[capture]).write(orders([1, 2], [1.0, -1.0]), 0)
    assert seen[0].column_names == ["id", "amount"]
    assert seen[0].num_rows == 2


def test_abort_of_a_committed_version_is_refused(target: str) -> None:
    sink = DeltaSink(target, "wap", UPSERT)
    sink.write(orders([1]), 0)
    with pytest.raises(AlreadyCommittedError):
        sink.abort(0)


# -- post-commit hooks --------------------------------------------------------------------


def test_user_hook_sees_the_committed_versions(target: str) -> None:
    seen: list[list[int]] = []
    sink = DeltaSink(
        target,
        "hooks",
        UPSERT,
        post_commit=[lambda done: seen.append(done.report.committed_versions)],
    )
    sink.write(orders([1]), 0)
    sink.pre_commit(orders([2]), 1)
    sink.pre_commit(orders([3]), 2)
    sink.commit(2)
    sink.commit(2)  # nothing new: hooks do not run
    assert seen == [[0], [1, 2]]


def test_a_failing_hook_is_logged_and_the_commit_stands(
    target: str, caplog: pytest.LogCaptureFixture
) -> None:
    def boom(done: PostCommit) -> None:
        raise OSError("webhook unreachable")

    sink = DeltaSink(target, "hooks", UPSERT, post_commit=[boom])
    with caplog.at_level(logging.WARNING, "deltasink"):
        report = sink.write(orders([1]), 0)
    assert report.committed_versions == [0]
    assert support.ids(target) == [1]
    assert any("webhook unreachable" in r.getMessage() for r in caplog.records)


def test_optimize_every_compacts_after_n_commits(target: str) -> None:
    sink = DeltaSink(
        target, "hooks", MergeSpec(mode="append"), post_commit=[hooks.optimize_every(3)]
    )
    for version in range(5):
        sink.write(orders([version]), version)
    # the embedded engine's compaction: a commit of dataChange=false files
    compacted = [is_compaction(c) for c in reversed(DeltaTable(target).history())]
    assert compacted.count(True) == 1
    assert compacted.index(True) == 3  # right after the third commit
    assert sink.commits_since_optimize() == 2
    assert support.ids(target) == [0, 1, 2, 3, 4]


def test_gc_every_expires_staging_files(target: str) -> None:
    sink = DeltaSink(
        target,
        "hooks",
        UPSERT,
        post_commit=[hooks.gc_every(2, retention=__import__("datetime").timedelta(0))],
    )
    sink.pre_commit(orders([1]), 0)  # staged (write() would publish it directly)
    sink.commit(0)
    assert len(support.staged_files_on_disk(sink.staging)) == 1
    sink.pre_commit(orders([2]), 1)
    sink.commit(1)
    assert support.staged_files_on_disk(sink.staging) == []


# -- ledger ------------------------------------------------------------------------------


def test_ledger_is_a_spark_dataframe_for_sql_users(spark: Any, target: str) -> None:
    sink = DeltaSink(target, "ledger", UPSERT)
    sink.write(orders([1, 2]), 0)
    sink.pre_commit(orders([2, 3]), 1)
    sink.pre_commit(orders([4]), 2)
    sink.commit(2)  # 1 and 2 coalesced into one target commit
    sink.ledger(spark).createOrReplaceTempView("orders_ledger")
    actual = spark.sql(
        "SELECT version, target_version, operation, rows_inserted, rows_updated, staged_rows "
        "FROM orders_ledger ORDER BY version"
    )
    expected = spark.createDataFrame(
        [(0, 0, "WRITE", 2, None, 2), (1, 1, "MERGE", 2, 1, 3), (2, 1, "MERGE", 2, 1, 3)],
        "version long, target_version long, operation string, rows_inserted long, "
        "rows_updated long, staged_rows long",
    )
    assert_df_equality(actual, expected, ignore_nullable=True)


# -- multi-table publish ---------------------------------------------------------------------


@pytest.fixture
def shop(tmp_path: Any) -> SinkGroup:
    return SinkGroup(
        {
            "orders": DeltaSink(str(tmp_path / "orders"), "shop", UPSERT),
            "lines": DeltaSink(str(tmp_path / "lines"), "shop", MergeSpec(mode="append")),
        }
    )


def test_group_write_publishes_every_table(shop: SinkGroup) -> None:
    shop.write({"orders": orders([1]), "lines": orders([10, 11])}, 0)
    shop.write({"orders": orders([2]), "lines": orders([])}, 1)
    status = shop.status()
    assert status.consistent_version == 1
    assert {n: s.committed_version for n, s in status.tables.items()} == {"orders": 1, "lines": 1}
    assert support.ids(shop.sinks["orders"].target) == [1, 2]
    assert support.ids(shop.sinks["lines"].target) == [10, 11]
    snapshot = shop.snapshot()
    assert snapshot is not None
    assert snapshot.version == 1
    assert snapshot.tables == {"orders": 1, "lines": 1}


def test_group_recover_finishes_a_half_committed_version(shop: SinkGroup) -> None:
    shop.pre_commit({"orders": orders([1]), "lines": orders([10])}, 0)
    shop.sinks["orders"].commit(0)  # the crash came after the first table's commit
    assert shop.status().consistent_version is None
    report = shop.recover()
    assert report.committed_versions == {"orders": [], "lines": [0]}
    assert shop.status().consistent_version == 0
    assert support.ids(shop.sinks["lines"].target) == [10]


def test_group_recover_aborts_a_version_staged_in_some_tables_only(shop: SinkGroup) -> None:
    shop.write({"orders": orders([1]), "lines": orders([10])}, 0)
    shop.sinks["orders"].pre_commit(orders([2]), 1)  # crash before "lines" was staged
    assert shop.status().incomplete_versions == [1]
    assert shop.commit(1).committed_versions == {"orders": [], "lines": []}  # not complete
    restarted = SinkGroup({n: DeltaSink(s.target, "shop") for n, s in shop.sinks.items()})
    report = restarted.recover()  # the restarted job
    assert report.aborted == {"orders": [1]}
    assert restarted.status().incomplete_versions == []
    assert support.ids(shop.sinks["orders"].target) == [1]
    restarted.write({"orders": orders([2]), "lines": orders([20])}, 1)  # the source resends
    assert restarted.status().consistent_version == 1
    assert support.ids(shop.sinks["lines"].target) == [10, 20]


def test_group_refuses_to_drop_an_incomplete_version_below_a_complete_one(
    shop: SinkGroup,
) -> None:
    shop.sinks["orders"].pre_commit(orders([1]), 0)  # group pre_commit(0) failed halfway
    shop.pre_commit({"orders": orders([2]), "lines": orders([20])}, 1)  # ... the job went on
    with pytest.raises(CommitError, match=r"versions \[0\] are staged in some tables only"):
        shop.commit(1)
    with pytest.raises(CommitError, match="Either abort version 0 in \\['orders'\\]"):
        shop.recover()
    assert support.ids(shop.sinks["lines"].target) == []  # nothing was half-published
    shop.sinks["orders"].abort(0)  # a person decides
    assert shop.recover().committed_versions == {"orders": [1], "lines": [1]}


def test_group_needs_one_batch_per_table(shop: SinkGroup) -> None:
    with pytest.raises(InvalidInputError, match="one batch per table"):
        shop.pre_commit({"orders": orders([1])}, 0)


def test_gc_beside_a_live_writer_retries_instead_of_raising(target: str) -> None:
    """Issue 11, defect 5: VACUUM commits to the staging log while the writer does."""
    import threading

    from typer.testing import CliRunner

    from deltasink.cli import app

    sink = DeltaSink(target, "live", MergeSpec(keys=["id"]))
    sink.write(pa.table({"id": [0]}), 0)
    errors: list[BaseException] = []
    done = threading.Event()

    def writer() -> None:
        try:
            for version in range(1, 25):
                sink.write(pa.table({"id": [version]}), version)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    operator = DeltaSink(target, "live")
    runs = codes = 0
    while not done.is_set():
        operator.gc(retention=0)
        result = CliRunner().invoke(app, ["gc", target, "--app", "live", "--retention-hours", "0"])
        codes += result.exit_code != 0
        runs += 1
    thread.join()
    assert errors == []
    assert runs > 0
    assert codes == 0
    assert support.ids(target) == list(range(25))
    assert support.marker(target, "live") == 24
    assert sink.status().pending_versions == []
