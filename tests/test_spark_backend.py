"""The Spark backend's parts that run without Delta's JVM jars, for real: table
references and DDL on the embedded engine, validation on Spark (same errors as the
embedded engine), the staging ledger over real Delta logs, the scoped confs, reading the
logs the embedded engine wrote (engine switch), and engine selection.

What needs delta-spark itself (txn options and confs honoured, DESCRIBE HISTORY) is in
``tests/test_contract_spark.py``.
"""

from __future__ import annotations

import json
import threading
from datetime import timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from deltalake import CommitProperties, DeltaTable, write_deltalake
from typer.testing import CliRunner

from deltasink import (
    ConfigurationError,
    DeltaSink,
    DuplicateKeyError,
    InvalidInputError,
    KeyColumnError,
    MergeSpec,
    SchemaMismatchError,
    StagingOwnershipError,
)
from deltasink.backends import select_engine
from deltasink.backends.spark import SparkBackend
from deltasink.backends.spark.conf import (
    TXN_APP_ID,
    TXN_VERSION,
    USER_METADATA,
    delta_txn,
    session_conf,
)
from deltasink.backends.spark.errors import is_conflict
from deltasink.backends.spark.ledger import StagingLedger, new_commits
from deltasink.backends.spark.tables import ddl_columns, ddl_type, table_ref
from deltasink.backends.spark.validate import prepare_frame
from deltasink.cli import app
from deltasink.input.batch import collect, prepare
from deltasink.ops.layout import VERSION_COLUMN
from deltasink.shapes.merge import key_ranges
from tests import support

UPSERT = MergeSpec(keys=["id"])

# -- table references and DDL -----------------------------------------------------------


@pytest.mark.parametrize(
    ("location", "ref"),
    [
        ("/lake/silver/orders", "delta.`/lake/silver/orders`"),
        ("s3://bucket/a b/orders", "delta.`s3://bucket/a b/orders`"),
        ("/tmp/we`ird", "delta.`/tmp/we``ird`"),
        ("abfss://c@acct.dfs.core.windows.net/t", "delta.`abfss://c@acct.dfs.core.windows.net/t`"),
        ("main.sales.orders", "`main`.`sales`.`orders`"),
        ("sales.orders", "`sales`.`orders`"),
        ("`my-cat`.sales.`odd.name`", "`my-cat`.`sales`.`odd.name`"),
        ("cat.db.`a``b`", "`cat`.`db`.`a``b`"),
        (
            "main.sales.orders__deltasink_staging_orders_ingest",
            "`main`.`sales`.`orders__deltasink_staging_orders_ingest`",
        ),
    ],
)
def test_table_ref(location: str, ref: str) -> None:
    assert table_ref(location) == ref


@pytest.mark.parametrize("name", ["main..orders", "main.`sales", "a.b`c", "a.`b`c", "a.b."])
def test_malformed_catalog_names_are_refused(name: str) -> None:
    with pytest.raises(ConfigurationError, match="table name"):
        table_ref(name)


def test_path_reference_resolves_on_spark(spark: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"id": pa.array([2, 1], pa.int64())}))
    assert [r.id for r in spark.sql(f"SELECT id FROM {table_ref(path)} ORDER BY id").collect()] == [
        1,
        2,
    ]


def test_ddl_round_trips_through_create_table(spark: Any, tmp_path: Path) -> None:
    df = spark.sql(
        "SELECT 1L AS id, timestamp'2024-01-01 00:00:00' AS ts, CAST(1.5 AS DECIMAL(10,2)) AS d, "
        "named_struct('a b', 1, 'c', array(named_struct('x', 1.0D))) AS st, map('k', 1) AS m, "
        "date'2024-01-01' AS dt, X'01' AS bin, true AS b, 1.5F AS f, CAST(1 AS SMALLINT) AS sm"
    )
    ddl = ddl_columns(df.schema)
    assert ddl == (
        "`id` bigint, `ts` timestamp, `d` decimal(10,2), "
        "`st` STRUCT<`a b`: int, `c`: ARRAY<STRUCT<`x`: double>>>, `m` MAP<string, int>, "
        "`dt` date, `bin` binary, `b` boolean, `f` float, `sm` smallint"
    )
    location = tmp_path / "created"
    spark.sql(f"CREATE TABLE ddl_round_trip ({ddl}) USING DELTA LOCATION '{location}'").collect()
    created = spark.sql(f"SELECT * FROM {table_ref(str(location))}").schema
    assert [(f.name, ddl_type(f.dataType)) for f in created.fields] == [
        (f.name, ddl_type(f.dataType)) for f in df.schema.fields
    ]


def _caused(outer: str, inner: Exception) -> Exception:
    try:
        try:
            raise inner
        except Exception as exc:
            raise RuntimeError(outer) from exc
    except RuntimeError as chained:
        return chained


@pytest.mark.parametrize(
    ("error", "retry"),
    [
        (Exception("[DELTA_CONCURRENT_APPEND] ConcurrentAppendException: Files were added"), True),
        (Exception("io.delta.exceptions.ConcurrentTransactionException: ..."), True),
        (Exception("[DELTA_METADATA_CHANGED] MetadataChangedException: The metadata ..."), True),
        (Exception("[DELTA_PROTOCOL_CHANGED] ProtocolChangedException: ..."), True),
        (_caused("py4j error", Exception("ConcurrentDeleteReadException: ...")), True),
        (Exception("[DELTA_MISSING_DELTA_TABLE] `/x` is not a Delta table."), False),
        (OSError("disk full"), False),
    ],
)
def test_which_errors_are_delta_conflicts(error: Exception, retry: bool) -> None:
    assert is_conflict(error) is retry


# -- validation on Spark: the embedded engine's errors, before anything is written ---------


def target_frame(spark: Any, path: str) -> Any:
    return spark.sql(f"SELECT * FROM {table_ref(path)}")


def both_paths(
    spark: Any, df: Any, spec: MergeSpec, target: str | None
) -> tuple[pa.Table, pa.Table, int]:
    """(embedded prepare, Spark prepare_frame collected, Spark's row count)."""
    schema = None if target is None else pa.schema(DeltaTable(target).schema().to_arrow())
    embedded = prepare(collect(df, spec), spec, schema, target=target or "t")
    frame = None if target is None else target_frame(spark, target)
    prepared = prepare_frame(df, spec, frame, table=target or "t")
    return embedded, prepared.frame.toArrow(), prepared.rows


def sorted_rows(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda r: json.dumps(r, sort_keys=True, default=str))


@pytest.mark.parametrize(
    ("spec", "rows", "schema", "expected"),
    [
        (
            UPSERT,
            [(1, "a"), (2, "b")],
            "id long, value string",
            [{"id": 1, "value": "a"}, {"id": 2, "value": "b"}],
        ),
        (
            MergeSpec(keys=["id"], sequence_by="ts"),
            [(1, "old", 1), (1, "new", 2), (2, "x", 1), (2, "tie-later", 1)],
            "id long, value string, ts long",
            [{"id": 1, "value": "new", "ts": 2}, {"id": 2, "value": "tie-later", "ts": 1}],
        ),
        (
            MergeSpec(keys=["id"], delete_when="op = 'D'"),
            [(1, "I"), (2, "D"), (3, None)],
            "id long, op string",
            [
                {"id": 1, "op": "I", "_deltasink_delete": False},
                {"id": 2, "op": "D", "_deltasink_delete": True},
                {"id": 3, "op": None, "_deltasink_delete": False},
            ],
        ),
        (MergeSpec(mode="append"), [(1,), (1,)], "id long", [{"id": 1}, {"id": 1}]),
        (UPSERT, [], "id long, value string", []),
    ],
    ids=["upsert", "sequence-by", "delete-when", "append-keeps-duplicates", "empty"],
)
def test_prepare_frame_stages_what_the_embedded_engine_stages(
    spark: Any, spec: MergeSpec, rows: list[tuple[Any, ...]], schema: str, expected: list[Any]
) -> None:
    df = spark.createDataFrame(rows, schema)
    embedded, staged, count = both_paths(spark, df, spec, None)
    assert (
        sorted_rows(staged) == sorted_rows(embedded) == sorted_rows(pa.Table.from_pylist(expected))
    )
    assert staged.column_names == embedded.column_names
    assert count == len(expected)


def test_prepare_frame_casts_to_the_target_types(spark: Any, tmp_path: Path) -> None:
    target = str(tmp_path / "t")
    write_deltalake(
        target,
        pa.table({"id": pa.array([0], pa.int64()), "amount": pa.array([0.5], pa.float64())}),
    )
    df = spark.createDataFrame([(1, 2.5)], "id int, amount float")
    embedded, staged, count = both_paths(spark, df, UPSERT, target)
    assert staged.schema.field("id").type == pa.int64()
    assert staged.schema.field("amount").type == pa.float64()
    assert staged.to_pylist() == embedded.to_pylist() == [{"id": 1, "amount": 2.5}]
    assert count == 1


BAD_INPUT = {
    "null-key": (UPSERT, [(1, "a"), (None, "b")], "id long, value string", KeyColumnError),
    "missing-key": (UPSERT, [("a",)], "value string", KeyColumnError),
    "null-sequence": (
        MergeSpec(keys=["id"], sequence_by="ts"),
        [(1, None)],
        "id long, ts long",
        KeyColumnError,
    ),
    "duplicate-key": (
        UPSERT,
        [(1, "a", 1), (1, "b", 2), (2, "c", 3)],
        "id long, value string, n long",
        DuplicateKeyError,
    ),
    "missing-column": (UPSERT, [(1, "a")], "id long, value string", SchemaMismatchError),
    "type-mismatch": (
        UPSERT,
        [(1, "x", "not a number")],
        "id long, value string, n string",
        SchemaMismatchError,
    ),
    "unknown-column": (
        UPSERT,
        [(1, "a", 1)],
        "id long, value string, extra long",
        SchemaMismatchError,
    ),
    "not-null-target-column": (
        UPSERT,
        [(1, None, 1)],
        "id long, value string, n long",
        SchemaMismatchError,
    ),
    "reserved-column": (UPSERT, [(1, 1)], "id long, _deltasink_x long", SchemaMismatchError),
    "bad-delete-when": (
        MergeSpec(keys=["id"], delete_when="no_such_column = 1"),
        [(1, "a")],
        "id long, value string",
        InvalidInputError,
    ),
}


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_gets_the_embedded_engines_error(spark: Any, tmp_path: Path, case: str) -> None:
    spec, rows, schema, error = BAD_INPUT[case]
    target = str(tmp_path / "t")
    write_deltalake(  # value is NOT NULL, n is a long
        target,
        pa.table(
            {"id": pa.array([0], pa.int64()), "value": ["z"], "n": pa.array([0], pa.int64())},
            schema=pa.schema(
                [
                    ("id", pa.int64()),
                    pa.field("value", pa.string(), nullable=False),
                    ("n", pa.int64()),
                ]
            ),
        ),
    )
    df = spark.createDataFrame(rows, schema)
    with pytest.raises(error) as embedded:
        prepare(
            collect(df, spec),
            spec,
            pa.schema(DeltaTable(target).schema().to_arrow()),
            target=target,
        )
    with pytest.raises(error) as on_spark:
        prepare_frame(df, spec, target_frame(spark, target), table=target)
    if case != "bad-delete-when":  # the engine's own analysis message differs
        assert str(on_spark.value) == str(embedded.value)
    assert on_spark.value.column == embedded.value.column  # type: ignore[attr-defined]


def test_a_bad_batch_is_refused_before_anything_is_written(spark: Any, target: str) -> None:
    DeltaSink(target, "app", UPSERT).write(pa.table({"id": [1], "value": ["a"]}), 0)
    staging = str(Path(target).parent / "spark-staging")
    backend = SparkBackend(spark=spark, target=target, staging=staging, app_id="app", spec=UPSERT)
    bad = spark.createDataFrame([(1, "a"), (1, "b")], "id long, value string")
    with pytest.raises(DuplicateKeyError, match="1 key"):
        backend.stage(bad, 1)
    with pytest.raises(InvalidInputError, match="must be a PySpark DataFrame"):
        backend.stage({"id": [1]}, 1)
    assert not Path(staging).exists()
    assert support.rows(target) == [{"id": 1, "value": "a"}]


# -- the staging ledger, over real Delta logs -------------------------------------------------


def commit(path: str, user_metadata: str | None, ids: list[int] | None = None) -> None:
    """A real Delta commit carrying ``userMetadata`` (as Spark's writers record it)."""
    data = pa.table(
        {
            "id": pa.array(ids or [], pa.int64()),
            VERSION_COLUMN: pa.array([0] * len(ids or []), pa.int64()),
        }
    )
    props = (
        CommitProperties(custom_metadata={"userMetadata": user_metadata}) if user_metadata else None
    )
    write_deltalake(
        path, data, mode="append", partition_by=[VERSION_COLUMN], commit_properties=props
    )


def history(path: str) -> Any:
    return lambda limit: DeltaTable(path).history(limit)


def test_ledger_tracks_empty_versions_columns_and_the_committed_mark(tmp_path: Path) -> None:
    path = str(tmp_path / "staging")
    commit(path, None)  # creation
    commit(path, 'deltasink stage app=app version=1 columns=["id", "v"]', [1])
    commit(path, 'deltasink stage-empty app=app version=2 columns=["id", "v"]')
    commit(path, 'deltasink stage-empty app=app version=3 columns=["id"]')
    commit(path, "deltasink discard-aborted app=app version=3")
    commit(path, 'deltasink stage app=app version=4 columns=["id"]', [4])
    commit(path, "deltasink discard-committed app=app version=4 versions=1,4")
    commit(path, 'deltasink stage-empty app=other version=5 columns=["id"]')  # another app
    commit(path, "deltasink claim-epoch app=app")
    ledger = StagingLedger("app")
    ledger.apply(new_commits(history(path), None, lambda c: False))
    stamps = {int(c["version"]): c["timestamp"] for c in DeltaTable(path).history()}
    assert list(ledger.empty) == [2]
    assert ledger.empty[2].timestamp() * 1000 == pytest.approx(stamps[2], abs=1)
    assert ledger.empty[2].tzinfo == timezone.utc
    assert ledger.columns == {1: ("id", "v"), 2: ("id", "v"), 3: ("id",), 4: ("id",)}
    assert ledger.mark == 4
    assert ledger.through == 8

    commit(path, "deltasink discard-aborted app=app version=9 versions=2,9")
    commit(path, "deltasink stage-empty app=app version=10 columns=[]")
    seen: list[int] = []

    def fetch(limit: int) -> Any:
        seen.append(limit)
        return DeltaTable(path).history(limit)

    fresh = new_commits(fetch, ledger.through, lambda c: False)
    assert [int(c["version"]) for c in fresh] == [9, 10]
    assert seen == [16]
    ledger.apply(fresh)
    assert list(ledger.empty) == [10]
    assert ledger.columns[10] == ()


def test_history_is_read_back_only_to_the_last_committed_version(tmp_path: Path) -> None:
    path = str(tmp_path / "staging")
    commit(path, None)
    for version in range(30):
        commit(path, f'deltasink stage app=app version={version} columns=["id"]', [version])
    commit(path, 'deltasink stage-empty app=app version=30 columns=["id"]')
    seen: list[int] = []

    def fetch(limit: int) -> Any:
        seen.append(limit)
        return DeltaTable(path).history(limit)

    fresh = new_commits(fetch, None, lambda c: StagingLedger.stops_scan(c, "app", 25))
    assert [StagingLedger.event(c, "app")["version"] for c in fresh] == [25, 26, 27, 28, 29, 30]  # type: ignore[index]
    assert seen == [16]
    seen.clear()
    fresh = new_commits(fetch, None, lambda c: StagingLedger.stops_scan(c, "app", 3))
    assert len(fresh) == 28
    assert seen == [16, 256]


def test_a_direct_publish_record_is_a_mark_and_stops_the_history_read(tmp_path: Path) -> None:
    """After direct publishes the staging history holds only ``committed`` records: each
    is a committed mark, and a history read stops at one at or below the committed
    version (nothing was pending when it was made), so a new sink reads 16 commits."""
    path = str(tmp_path / "staging")
    commit(path, None)
    for version in range(40):
        commit(path, f"deltasink committed app=app version={version}")
    commit(path, 'deltasink stage-empty app=app version=40 columns=["id"]')
    commit(path, "deltasink committed app=other version=99")  # another app's: ignored
    seen: list[int] = []

    def fetch(limit: int) -> Any:
        seen.append(limit)
        return DeltaTable(path).history(limit)

    fresh = new_commits(fetch, None, lambda c: StagingLedger.stops_scan(c, "app", 39))
    assert [int(c["version"]) for c in fresh] == [40, 41, 42]
    assert seen == [16]
    ledger = StagingLedger("app")
    ledger.apply(fresh)
    assert ledger.mark == 39
    assert list(ledger.empty) == [40]
    # Above the committed version a record does not stop the read (it is not a mark
    # the target confirms yet): the read goes on to the next page.
    seen.clear()
    fresh = new_commits(fetch, None, lambda c: StagingLedger.stops_scan(c, "app", 20))
    assert [int(c["version"]) for c in fresh][:2] == [21, 22]
    assert seen == [16, 256]


def test_predicate_from_bounds_bounds_integers_and_dates_only() -> None:
    """The validating aggregation's bounds (Python values from ``collect``) give the
    embedded engine's key-range predicate; strings and empty batches stay unbounded."""
    from datetime import date

    from deltasink.backends.spark.prune import bound_exprs, predicate_from_bounds

    assert bound_exprs(["a", "b c"]) == [
        "min(`a`) AS `lo_0`",
        "max(`a`) AS `hi_0`",
        "min(`b c`) AS `lo_1`",
        "max(`b c`) AS `hi_1`",
    ]
    row = {"lo_0": -3, "hi_0": 7, "lo_1": date(2026, 1, 2), "hi_1": date(2026, 2, 1)}
    assert predicate_from_bounds(row, ["a", "d"]) == key_ranges(
        pa.table({"a": [-3, 7], "d": [date(2026, 1, 2), date(2026, 2, 1)]}), ["a", "d"]
    )
    assert predicate_from_bounds({"lo_0": "x", "hi_0": "y"}, ["s"]) is None
    assert predicate_from_bounds({"lo_0": None, "hi_0": None}, ["a"]) is None  # no rows


# -- scoped confs ------------------------------------------------------------------------------


KEY = "spark.deltasink.test.key"


def test_session_conf_unsets_a_key_that_had_no_value(spark: Any) -> None:
    assert spark.conf.get(KEY, None) is None
    with session_conf(spark, {KEY: "inside"}):
        assert spark.conf.get(KEY, None) == "inside"
    assert spark.conf.get(KEY, None) is None


def test_session_conf_restores_the_previous_value(spark: Any) -> None:
    spark.conf.set(KEY, "before")
    try:
        with session_conf(spark, {KEY: 7}):
            assert spark.conf.get(KEY, None) == "7"
        assert spark.conf.get(KEY, None) == "before"
        with session_conf(spark, {KEY: None}):  # None unsets it for the block
            assert spark.conf.get(KEY, None) is None
        assert spark.conf.get(KEY, None) == "before"
    finally:
        spark.conf.unset(KEY)


def test_session_conf_restores_after_an_error_and_nests(spark: Any) -> None:
    other = KEY + ".other"
    spark.conf.set(other, "kept")
    seen: list[tuple[str | None, str | None]] = []

    def body() -> None:
        with session_conf(spark, {KEY: "a", other: "b"}):
            with session_conf(spark, {KEY: "nested"}):
                seen.append((spark.conf.get(KEY, None), spark.conf.get(other, None)))
            seen.append((spark.conf.get(KEY, None), spark.conf.get(other, None)))
            raise RuntimeError("boom")

    try:
        with pytest.raises(RuntimeError, match="boom"):
            body()
        assert seen == [("nested", "b"), ("a", "b")]
        assert (spark.conf.get(KEY, None), spark.conf.get(other, None)) == (None, "kept")
    finally:
        spark.conf.unset(other)


def test_delta_txn_sets_the_three_delta_confs_for_one_block(spark: Any) -> None:
    with delta_txn(spark, "orders", 42, user_metadata="deltasink commit app=orders version=42"):
        assert spark.conf.get(TXN_APP_ID, None) == "orders"
        assert spark.conf.get(TXN_VERSION, None) == "42"
        assert spark.conf.get(USER_METADATA, None) == "deltasink commit app=orders version=42"
    assert [spark.conf.get(k, None) for k in (TXN_APP_ID, TXN_VERSION, USER_METADATA)] == [
        None,
        None,
        None,
    ]


def test_session_conf_blocks_on_one_session_do_not_interleave(spark: Any) -> None:
    seen: list[tuple[str, str | None]] = []
    inside = threading.Event()
    release = threading.Event()

    def first() -> None:
        with session_conf(spark, {KEY: "first"}):
            inside.set()
            release.wait(10)
            seen.append(("first", spark.conf.get(KEY, None)))

    def second() -> None:
        inside.wait(10)
        with session_conf(spark, {KEY: "second"}):
            seen.append(("second", spark.conf.get(KEY, None)))

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    inside.wait(10)
    release.set()
    for thread in threads:
        thread.join(30)
    assert seen == [("first", "first"), ("second", "second")]
    assert spark.conf.get(KEY, None) is None


# -- reading what the embedded engine wrote: an operator can switch engines -------------------


def test_spark_backend_reads_the_state_the_embedded_backend_wrote(spark: Any, target: str) -> None:
    embedded = DeltaSink(target, "app", UPSERT)
    embedded.write(pa.table({"id": [1], "value": ["a"]}), 0)
    embedded.pre_commit(pa.table({"id": [2], "value": ["b"]}), 1)
    embedded.pre_commit(
        pa.table({"id": pa.array([], pa.int64()), "value": pa.array([], pa.string())}), 2
    )
    backend = SparkBackend(
        spark=spark, target=target, staging=embedded.staging, app_id="app", spec=None
    )
    assert backend.log_reader == "delta-rs"
    state, expected = backend.read_state(), embedded._core.state()
    assert state.committed_version == expected.committed_version == 0
    assert [(s.version, s.rows) for s in state.staged] == [(1, 1), (2, 0)]
    assert state.staged == expected.staged
    assert backend.recorded_spec() == UPSERT
    assert backend.target_exists()
    assert backend.maintenance().history(None) == embedded.history()
    assert backend.maintenance().commits_since_optimize(10) == 1
    with pytest.raises(StagingOwnershipError, match="belongs to target"):
        SparkBackend(
            spark=spark, target=target + "-other", staging=embedded.staging, app_id="app", spec=None
        ).read_state()


@pytest.mark.parametrize(
    ("target", "staging", "options", "databricks", "reader"),
    [
        ("/lake/t", "/lake/s", None, False, "delta-rs"),
        ("/lake/t", "/lake/s", None, True, "spark"),  # a bare path means DBFS there
        ("s3://b/t", "s3://b/s", None, False, "spark"),
        ("s3://b/t", "s3://b/s", {"AWS_REGION": "eu-west-1"}, False, "delta-rs"),
        ("main.db.t", "main.db.t__deltasink_staging_app", None, False, "spark"),
    ],
)
def test_who_reads_the_logs(
    monkeypatch: pytest.MonkeyPatch,
    target: str,
    staging: str,
    options: dict[str, str] | None,
    databricks: bool,
    reader: str,
) -> None:
    if databricks:
        monkeypatch.setenv("DATABRICKS_RUNTIME_VERSION", "15.4")
    else:
        monkeypatch.delenv("DATABRICKS_RUNTIME_VERSION", raising=False)
    backend = SparkBackend(
        spark=None,
        target=target,
        staging=staging,
        app_id="app",
        spec=UPSERT,
        storage_options=options,
    )
    assert backend.log_reader == reader


def test_log_reader_choices_are_checked() -> None:
    with pytest.raises(ConfigurationError, match="needs path tables"):
        SparkBackend(
            spark=None,
            target="c.d.t",
            staging="c.d.s",
            app_id="a",
            spec=None,
            log_reader="delta-rs",
        )
    with pytest.raises(ConfigurationError, match="log_reader must be"):
        SparkBackend(spark=None, target="/t", staging="/s", app_id="a", spec=None, log_reader="x")  # type: ignore[arg-type]


# -- engine selection ---------------------------------------------------------------------------


def test_auto_picks_the_embedded_engine_for_the_embedded_session(spark: Any, target: str) -> None:
    assert select_engine("auto", spark, target) == (
        "embedded",
        "auto: no Delta-enabled Spark session, so delta-rs makes the commits",
    )
    sink = DeltaSink(target, "app", UPSERT)  # the active session is the embedded one
    sink.write(pa.table({"id": [1], "value": ["a"]}), 0)
    status = sink.status()
    assert (status.engine, status.engine_reason) == (
        "embedded",
        "auto: no Delta-enabled Spark session, so delta-rs makes the commits",
    )
    assert status.to_dict()["engine"] == "embedded"
    result = CliRunner().invoke(app, ["status", target, "--app", "app", "--json"])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert (shown["engine"], shown["engine_reason"]) == (status.engine, status.engine_reason)
    plain = CliRunner().invoke(app, ["status", target, "--app", "app"])
    assert "embedded" in plain.output
    assert "no Delta-enabled Spark session" in plain.output


def test_an_explicit_engine_overrides_the_session(spark: Any, target: str) -> None:
    other = SimpleNamespace()  # a session that is neither Delta-enabled nor the embedded one
    sink = DeltaSink(target, "app", UPSERT, engine="spark", spark=other)
    assert (sink.engine, sink.engine_reason) == ("spark", "engine='spark' was given")
    assert isinstance(sink._backend, SparkBackend)
    embedded = DeltaSink(target, "app", UPSERT, engine="embedded", spark=spark)
    assert (embedded.engine, embedded.engine_reason) == ("embedded", "engine='embedded' was given")
    # Sail ignores Delta's txn options: the spark engine on it would not be idempotent
    with pytest.raises(ConfigurationError, match="engine='embedded'"):
        DeltaSink(target, "app", UPSERT, engine="spark", spark=spark)
    with pytest.raises(ConfigurationError, match="Sail"):
        DeltaSink(target, "app", UPSERT, engine="spark")  # the active session is Sail
    assert not support.exists(target)


def test_a_catalog_name_on_the_embedded_session_is_refused_by_name(spark: Any) -> None:
    """Before: Sail's raw parser error at the first statement. Now: before anything."""
    for session in (spark, None):  # given, or the active one
        with pytest.raises(ConfigurationError, match=r"catalog table name.*Pass the table's path"):
            DeltaSink("main.sales.orders", "orders-ingest", UPSERT, spark=session)


def test_a_catalog_name_picks_the_spark_engine(spark: Any) -> None:
    sink = DeltaSink("main.sales.orders", "orders-ingest", UPSERT, spark=SimpleNamespace())
    assert (sink.engine, sink.engine_reason) == (
        "spark",
        "auto: the target is a catalog table name",
    )
    assert sink.staging == "main.sales.orders__deltasink_staging_orders_ingest"
    backend = sink._backend
    assert isinstance(backend, SparkBackend)
    assert (backend.target_ref, backend.staging_ref, backend.log_reader) == (
        "`main`.`sales`.`orders`",
        "`main`.`sales`.`orders__deltasink_staging_orders_ingest`",
        "spark",
    )
    with pytest.raises(ConfigurationError, match="catalog table name"):
        DeltaSink("main.sales.orders", "orders-ingest", UPSERT, engine="embedded")


def test_a_databricks_runtime_picks_the_spark_engine(
    spark: Any, target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABRICKS_RUNTIME_VERSION", "15.4")
    sink = DeltaSink(target, "app", UPSERT, spark=spark)
    assert (sink.engine, sink.engine_reason) == ("spark", "auto: Databricks runtime 15.4")
    assert sink._backend.log_reader == "spark"  # type: ignore[attr-defined]


def test_the_spark_engine_without_a_session_says_so(
    target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = SparkBackend(
        spark=None, target=target, staging=target + "-s", app_id="a", spec=UPSERT
    )
    from pyspark.sql import SparkSession

    monkeypatch.setattr(SparkSession, "getActiveSession", staticmethod(lambda: None))
    with pytest.raises(ConfigurationError, match="needs a Spark session"):
        backend.stage(pa.table({"id": [1]}), 0)


def test_chispa_sees_the_same_rows_through_both_references(spark: Any, target: str) -> None:
    DeltaSink(target, "app", UPSERT).write(pa.table({"id": [2, 1], "value": ["b", "a"]}), 0)
    by_ref = spark.sql(f"SELECT * FROM {table_ref(target)} ORDER BY id")
    by_path = spark.read.format("delta").load(target).orderBy("id")
    assert_df_equality(by_ref, by_path)
