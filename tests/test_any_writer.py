"""Tables every Delta writer touches (issue 35), proven against delta-spark: one
partition rule (``''`` in a string partition column is null, the protocol's), whichever
engine or plain writer wrote first; values Spark writes as INT96 survive the embedded
engine or are refused by name; the spark engine's coalesced commit against a concurrent
writer of the same app id.

Every test runs on the delta-spark suite's classic session (the ``delta_spark``
fixture), beside the embedded engine fed with ``pyarrow`` tables (no Sail in this
process). Inside the full suite these tests run in that suite's own process
(``CHILD_MODULES``, see ``tests/conftest.py``).
"""

from __future__ import annotations

import datetime as dt
import glob
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from deltasink import DeltaSink, MergeSpec, TableSpec
from tests import support
from tests.test_contract_spark import DELTA_SPARK_MODULE, FULL, delta_spark, sliced

pytestmark = DELTA_SPARK_MODULE
__all__ = ["delta_spark"]  # the delta-spark suite's session fixture, shared

LAYOUT = TableSpec(partition_by=["p"])
SCHEMA = pa.schema([("p", pa.string()), ("id", pa.int64()), ("v", pa.string())])


def batch(*rows: tuple[Any, ...]) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(SCHEMA.names, r, strict=True)) for r in rows], SCHEMA)


def sink(engine: str, spark: Any, target: str, app: str, spec: MergeSpec, **kw: Any) -> DeltaSink:
    """A sink of ``engine`` ("embedded": delta-rs commits, Arrow input; "spark": the
    classic session's delta-spark)."""
    extra = {"spark": spark} if engine == "spark" else {}
    return DeltaSink(target, app, spec, engine=engine, table=LAYOUT, **extra, **kw)


def plain_spark_write(spark: Any, target: str, rows: pa.Table, mode: str = "append") -> None:
    """A plain delta-spark ``df.write`` (no deltasink), partitioned like :data:`LAYOUT`."""
    frame = spark.createDataFrame(rows.to_pylist(), "p string, id long, v string")
    frame.write.format("delta").mode(mode).partitionBy("p").save(target)


def read_both(spark: Any, target: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The target's rows as delta-spark and as delta-rs read them, sorted."""

    def key(r: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple((v is None, "" if v is None else v) for v in r)

    by_spark = [tuple(r) for r in spark.read.format("delta").load(target).collect()]
    by_rs = [tuple(r.values()) for r in DeltaTable(target).to_pyarrow_table().to_pylist()]
    return sorted(by_spark, key=key), sorted(by_rs, key=key)


def partition_values(target: str) -> list[Any]:
    """Every ``p`` partition value the target's live files record in the log, as
    recorded (delta-rs's own readers show a recorded ``""`` as null)."""
    live: dict[str, Any] = {}
    for actions in support.log_commits(target).values():
        for action in actions:
            if "add" in action:
                live[action["add"]["path"]] = action["add"]["partitionValues"].get("p")
            elif "remove" in action:
                live.pop(action["remove"]["path"], None)
    return sorted(live.values(), key=lambda v: (v is not None, v or ""))


FIRST_THEN = [
    ("delta-spark", "embedded"),
    ("spark", "embedded"),
    ("embedded", "spark"),
    ("embedded", "embedded"),
]


@pytest.mark.parametrize(
    ("first", "then"),
    # make test-delta-spark: the table zoo's sample took its place in make test (its CI
    # run writes '' and null partitions over delta-spark's tables on both engines)
    sliced(FIRST_THEN, ()),
    ids=["-".join(p) for p in FIRST_THEN],
)
def test_an_empty_string_partition_key_is_the_null_partition_whoever_wrote_first(
    delta_spark: Any, tmp_path: Path, first: str, then: str
) -> None:
    """The protocol's rule, on every writer: ``''`` in the string partition column ``p``
    is null. Written by one writer, upserted by the same ``('', 1)`` key through the
    other engine: one row per key, read back as null by delta-spark and delta-rs alike,
    and no file records ``""``."""
    target = str(tmp_path / "t")
    spec = MergeSpec(keys=["p", "id"])
    rows = batch(("", 1, "a"), ("x", 2, "a"))
    if first == "delta-spark":
        plain_spark_write(delta_spark, target, rows)
    else:
        sink(first, delta_spark, target, "one", spec).write(rows, 0)
    sink(then, delta_spark, target, "two", spec).write(batch(("", 1, "b"), ("x", 2, "b")), 0)
    expected = [("x", 2, "b"), (None, 1, "b")]
    assert read_both(delta_spark, target) == (expected, expected)
    assert partition_values(target) == [None, "x"]


@pytest.mark.parametrize("engine", sliced(["embedded", "spark"], ("embedded",)))
def test_replace_by_an_empty_string_replaces_the_null_partition_another_writer_wrote(
    delta_spark: Any, tmp_path: Path, engine: str
) -> None:
    """``replace_by=["p"]`` with the value ``''`` replaces the null partition, whether
    delta-spark (null) or plain delta-rs (``""``) recorded it."""
    from deltalake import write_deltalake

    target = str(tmp_path / "t")
    plain_spark_write(delta_spark, target, batch(("", 1, "old"), ("x", 2, "old")))
    write_deltalake(target, batch(("", 3, "old")), mode="append")  # records p=""
    assert sorted(map(str, partition_values(target))) == ["", "None", "x"]
    replace = sink(engine, delta_spark, target, "r", MergeSpec(mode="replace", replace_by=["p"]))
    replace.write(batch(("", 4, "new")), 0)
    expected = [("x", 2, "old"), (None, 4, "new")]
    assert read_both(delta_spark, target) == (expected, expected)


@FULL  # five spark engine commits: make test-delta-spark (make test keeps the cheaper cases)
@pytest.mark.parametrize("engine", ["embedded", "spark"])
@pytest.mark.parametrize("coalesce", [True, False], ids=["coalesced", "one-by-one"])
def test_null_safe_keys_over_empty_string_and_null_are_one_key(
    delta_spark: Any, tmp_path: Path, engine: str, coalesce: bool
) -> None:
    """With ``null_safe_keys``, ``''`` and null in a string partition key column are the
    one null partition: in a batch they are one key (a duplicate), across pending
    versions the later wins, coalesced or one by one, on both engines."""
    from deltasink import DuplicateKeyError

    target = str(tmp_path / "t")
    spec = MergeSpec(keys=["p", "id"], null_safe_keys=True)
    first = sink(engine, delta_spark, target, "a", spec, coalesce=coalesce)
    first.write(batch(("", 1, "a"), (None, 2, "a"), ("x", 3, "a")), 0)
    with pytest.raises(DuplicateKeyError):
        first.write(batch(("", 1, "b"), (None, 1, "c")), 1)
    first.pre_commit(batch((None, 1, "b"), ("", 2, "b")), 1)
    first.pre_commit(batch(("", 1, "c"), (None, 4, "c")), 2)
    first.pre_commit(batch((None, 4, "d"), ("", 5, "d")), 3)
    first.commit(3)
    expected = [("x", 3, "a"), (None, 1, "c"), (None, 2, "b"), (None, 4, "d"), (None, 5, "d")]
    assert read_both(delta_spark, target) == (expected, expected)
    other = "spark" if engine == "embedded" else "embedded"
    sink(other, delta_spark, target, "b", spec).write(batch((None, 5, "e"), ("", 1, "e")), 0)
    expected = [("x", 3, "a"), (None, 1, "e"), (None, 2, "b"), (None, 4, "d"), (None, 5, "e")]
    assert read_both(delta_spark, target) == (expected, expected)
    assert support.marker(target, "a") == 3


# -- every value survives every writer: timestamps Spark writes as INT96 ------------------

EDGES = [
    (6, dt.datetime(1, 1, 1, tzinfo=dt.timezone.utc)),
    (7, None),
    (8, dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.timezone.utc)),
    (9, dt.datetime(1582, 10, 4, 12, 0, 0, 1, tzinfo=dt.timezone.utc)),
]
TS = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us", "UTC"))])


def ts_rows(*rows: tuple[int, dt.datetime | None]) -> pa.Table:
    return pa.Table.from_pylist([{"id": i, "ts": t} for i, t in rows], TS)


def spark_ts(spark: Any, target: str) -> list[tuple[int, str | None]]:
    """The target's ``(id, ts)`` as delta-spark reads them (ISO text, microseconds)."""
    frame = spark.read.format("delta").load(target)
    text = "date_format(ts, \"yyyy-MM-dd'T'HH:mm:ss.SSSSSS\")"
    return [tuple(r) for r in frame.selectExpr("id", f"{text} AS ts").orderBy("id").collect()]


def iso(rows: list[tuple[int, dt.datetime | None]]) -> list[tuple[int, str | None]]:
    return [
        (i, None if t is None else t.strftime("%Y-%m-%dT%H:%M:%S.%f").rjust(26, "0"))
        for i, t in rows
    ]


def parquet_types(target: str) -> set[str]:
    """The physical types of ``ts`` in the target's live files."""
    import pyarrow.parquet as pq

    found = set()
    for path in DeltaTable(target).file_uris():
        schema = pq.ParquetFile(path.removeprefix("file://")).schema
        found |= {
            schema.column(i).physical_type
            for i in range(len(schema))
            if schema.column(i).name == "ts"
        }
    return found


def parquet_file_types(path: str) -> set[str]:
    import pyarrow.parquet as pq

    schema = pq.ParquetFile(path).schema
    return {schema.column(i).physical_type for i in range(len(schema))}


@FULL  # make test-delta-spark: the table zoo's CI run upserts INT96 edges too
def test_int96_timestamps_outside_1677_2262_are_refused_by_name_not_wrapped(
    delta_spark: Any, tmp_path: Path
) -> None:
    """A file delta-spark wrote with INT96 timestamps (its default) holding 0001-01-01
    and 9999-12-31: an embedded upsert that would rewrite it is refused by name, nothing
    written; an append (no file rewritten) goes through, and every value reads back
    exactly in Spark."""
    from deltasink import UnsupportedTableFeatureError

    target = str(tmp_path / "t")
    frame = delta_spark.createDataFrame(ts_rows(*EDGES).to_pylist(), "id long, ts timestamp")
    frame.coalesce(1).write.format("delta").save(target)
    assert parquet_types(target) == {"INT96"}
    before = support.table_version(target)
    upsert = DeltaSink(target, "up", MergeSpec(keys=["id"]), engine="embedded")
    with pytest.raises(UnsupportedTableFeatureError, match="INT96") as raised:
        upsert.write(ts_rows((7, dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc))), 0)
    assert raised.value.features == ["INT96 timestamps outside 1677-2262"]
    assert support.table_version(target) == before
    assert support.marker(target, "up") is None
    append = DeltaSink(target, "app", MergeSpec(mode="append"), engine="embedded")
    append.write(ts_rows((10, EDGES[0][1])), 0)
    assert spark_ts(delta_spark, target) == iso([*EDGES, (10, EDGES[0][1])])


@FULL
def test_the_spark_engine_writes_timestamps_delta_rs_reads_back_exactly(
    delta_spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The spark engine writes ``TIMESTAMP_MICROS`` around its own statements (the
    user's session conf is left as it was), so the embedded engine then upserts the
    target and every instant from 0001 to 9999 survives; a version an earlier release
    staged as INT96 is recovered by the embedded engine exactly."""
    from deltasink.backends.spark import conf

    key = conf.PARQUET_TIMESTAMPS
    assert delta_spark.conf.get(key, None) in (None, "INT96")
    target = str(tmp_path / "t")
    spark_sink = DeltaSink(target, "s", MergeSpec(keys=["id"]), engine="spark", spark=delta_spark)
    spark_sink.write(
        delta_spark.createDataFrame(ts_rows(*EDGES).to_pylist(), "id long, ts timestamp").coalesce(
            1
        ),
        0,
    )
    assert parquet_types(target) == {"INT64"}
    assert delta_spark.conf.get(key, None) in (None, "INT96")
    embedded = DeltaSink(target, "e", MergeSpec(keys=["id"]), engine="embedded")
    embedded.write(ts_rows((7, dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc))), 0)
    expected = [EDGES[0], (7, dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc)), *EDGES[2:]]
    assert spark_ts(delta_spark, target) == iso(expected)

    from deltasink.backends.spark import session

    monkeypatch.setattr(session, "WRITE_CONFS", {})  # an earlier release: INT96 staged
    old = DeltaSink(target, "old", MergeSpec(keys=["id"]), engine="spark", spark=delta_spark)
    old.pre_commit(
        delta_spark.createDataFrame(
            ts_rows((11, EDGES[0][1]), (12, EDGES[2][1])).to_pylist(), "id long, ts timestamp"
        ),
        0,
    )
    staged = glob.glob(
        os.path.join(f"{target}_deltasink_staging", "old", "**", "*.parquet"), recursive=True
    )
    assert {t for f in staged for t in parquet_file_types(f)} >= {"INT96"}
    monkeypatch.undo()
    assert DeltaSink(target, "old", engine="embedded").recover().committed_versions == [0]
    assert spark_ts(delta_spark, target) == iso([*expected, (11, EDGES[0][1]), (12, EDGES[2][1])])


# -- a coalesced commit against another writer of the same app id ------------------------

ROWS = pa.schema([("id", pa.int64()), ("v", pa.string())])


def id_rows(version: int) -> pa.Table:
    return pa.Table.from_pylist(
        [{"id": version * 10 + i, "v": f"v{version}"} for i in (1, 2)], ROWS
    )


def foreign_commit(spark: Any, target: str, app: str, version: int) -> None:
    """A plain Delta idempotent write of ``version``'s rows (another job, or a replaced
    process, still writing with the same app id)."""
    frame = spark.createDataFrame(id_rows(version).to_pylist(), "id long, v string")
    writer = frame.write.format("delta").mode("append")
    writer.option("txnAppId", app).option("txnVersion", str(version)).save(target)


@pytest.mark.parametrize("engine", sliced(["spark", "embedded"], ("spark",)))
def test_a_coalesced_commit_never_applies_a_version_another_writer_committed(
    delta_spark: Any, tmp_path: Path, engine: str
) -> None:
    """Versions 1 and 2 pending; while deltasink publishes them in one commit, another
    writer of the same app id commits version 1 (with ``txnAppId``/``txnVersion``):
    version 1 is in the target once, version 2 once, the marker at 2."""
    from deltasink._faults import armed

    target = str(tmp_path / "t")
    extra = {"spark": delta_spark} if engine == "spark" else {}
    writer = DeltaSink(target, "app", MergeSpec(mode="append"), engine=engine, **extra)
    writer.write(id_rows(0), 0)
    writer.pre_commit(id_rows(1), 1)
    writer.pre_commit(id_rows(2), 2)

    def other(versions: list[int]) -> None:
        if versions == [1, 2]:
            foreign_commit(delta_spark, target, "app", 1)

    with armed("publish.before_target_commit", other):
        report = writer.commit(2)
    assert 2 in report.committed_versions
    assert support.ids(target) == [1, 2, 11, 12, 21, 22]
    assert support.marker(target, "app") == 2


@pytest.mark.parametrize("engine", sliced(["embedded", "spark"], ("embedded",)))
def test_a_running_sinks_status_shows_a_plain_delta_txn_write_of_its_app(
    delta_spark: Any, tmp_path: Path, engine: str
) -> None:
    """A sink commits versions 0..2; plain delta-spark then writes with ``txnAppId`` =
    the sink's app and ``txnVersion=3`` (a migrated job's idempotent write). The running
    sink's ``status()``, ``offsets()`` and ``history()`` read the target as a new
    process does (``deltasink status``): committed version 3 (it said 2 on the embedded
    engine, answering from its own last commit). ``write(3)`` then writes nothing,
    ``write(4)`` writes."""
    target = str(tmp_path / "t")
    extra = {"spark": delta_spark} if engine == "spark" else {}
    writer = DeltaSink(target, "A", MergeSpec(keys=["id"]), engine=engine, **extra)
    for version in range(3):
        writer.write(id_rows(version), version)
    assert writer.status().committed_version == 2
    foreign_commit(delta_spark, target, "A", 3)
    fresh = DeltaSink(target, "A", engine="embedded")
    assert fresh.status().committed_version == 3
    status = writer.status()
    assert (status.committed_version, status.pending_versions) == (3, [])
    assert writer.offsets().version == 3
    assert [e.version for e in writer.history()] == [e.version for e in fresh.history()]
    assert writer.write(id_rows(3), 3).results == ()
    assert support.ids(target) == [1, 2, 11, 12, 21, 22, 31, 32]  # version 3 once
    assert writer.write(id_rows(4), 4).committed_versions == [4]
    assert support.ids(target) == [1, 2, 11, 12, 21, 22, 31, 32, 41, 42]
    assert writer.status().committed_version == support.marker(target, "A") == 4


@FULL  # make test: tests/test_first_contact.py's embedded cases (the check is shared)
@pytest.mark.parametrize("engine", ["spark", "embedded"])
def test_a_batch_lacking_a_target_column_is_refused_unless_the_spec_allows_it(
    delta_spark: Any, tmp_path: Path, engine: str
) -> None:
    """As Delta's MERGE without schema evolution: an upsert batch without the target's
    ``v`` is refused by name before anything is staged; with
    ``allow_missing_columns=True`` the inserted row gets null, the matched one keeps its
    ``v``. The target written by plain delta-spark, with a generated column the batch
    may lack (Delta computes it)."""
    from deltasink import SchemaMismatchError

    target = str(tmp_path / "t")
    delta_spark.sql(
        f"CREATE TABLE delta.`{target}` (id BIGINT, v STRING, "
        "g BIGINT GENERATED ALWAYS AS (id * 10)) USING delta"
    )
    delta_spark.sql(f"INSERT INTO delta.`{target}` (id, v) VALUES (1, 'a'), (2, 'b')")
    extra = {"spark": delta_spark} if engine == "spark" else {}
    writer = DeltaSink(target, "m", MergeSpec(keys=["id"]), engine=engine, **extra)
    subset = pa.table({"id": pa.array([2, 3], pa.int64())})
    with pytest.raises(SchemaMismatchError) as raised:
        writer.write(subset, 0)
    assert str(raised.value).startswith(f"the batch lacks column(s) ['v'] of target {target}: ")
    assert raised.value.column == "v"
    assert writer.status().pending_versions == []
    assert support.marker(target, "m") is None
    spec = MergeSpec(keys=["id"], allow_missing_columns=True)
    DeltaSink(target, "m", spec, engine=engine, **extra).write(subset, 0)
    assert sorted(tuple(r) for r in delta_spark.read.format("delta").load(target).collect()) == [
        (1, "a", 10),
        (2, "b", 20),
        (3, None, 30),
    ]


@FULL
def test_a_foreign_commit_inside_the_last_moment_stops_the_writer_loudly(
    delta_spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The moment Delta leaves open: another writer commits version 1 after the spark
    engine's last look at the marker and before its MERGE takes its snapshot. The
    commit's own snapshot (its ``readVersion``) shows it: ``ForeignWriterError`` names
    the version applied twice instead of a silent duplicate."""
    from deltasink import ForeignWriterError
    from deltasink.backends.spark.publish import TargetWriter

    target = str(tmp_path / "t")
    writer = DeltaSink(target, "app", MergeSpec(mode="append"), engine="spark", spark=delta_spark)
    writer.write(id_rows(0), 0)
    writer.pre_commit(id_rows(1), 1)
    writer.pre_commit(id_rows(2), 2)
    look = TargetWriter._last_look

    def late(self: TargetWriter, versions: Any) -> None:
        look(self, versions)
        if list(versions) == [1, 2]:
            foreign_commit(delta_spark, target, "app", 1)

    monkeypatch.setattr(TargetWriter, "_last_look", late)
    with pytest.raises(ForeignWriterError, match="committed version 1") as raised:
        writer.commit(2)
    assert raised.value.versions == (1,)
    assert support.ids(target) == [1, 2, 11, 11, 12, 12, 21, 22]  # the damage, named


# -- any writer, any order: the differential model with the JVM writers -------------------


#: Sequences run side by side (threads, each on a session of its own over the shared
#: JVM): a tiny table's Delta commit is mostly the driver's log and planning work, which
#: overlaps across sessions; each example is one group.
GROUP = 10


@pytest.mark.generated
@pytest.mark.delta_spark_full  # make test runs the model's embedded sample only
@pytest.mark.timeout(0)
def test_any_writer_any_order_with_spark_leaves_the_table_the_rules_give(delta_spark: Any) -> None:
    """:mod:`tests.writers_model` with every writer: the embedded and spark engines,
    plain delta-rs and delta-spark (``df.write``, ``MERGE INTO``), ``OPTIMIZE`` from
    either, auto compaction from two apps; tiny tables, :data:`GROUP` sequences at a
    time, each on a ``newSession()`` of this JVM (its own SQL confs: the spark engine's
    scoped txn confs never reach another sequence's plain writes)."""
    import tempfile
    from concurrent.futures import ThreadPoolExecutor

    from hypothesis import given
    from hypothesis import strategies as st

    from tests import generated
    from tests.writers_model import (
        EMBEDDED_WRITERS,
        JVM_WRITERS,
        World,
        compaction_from,
        run_sequence,
        strategies,
    )

    # Weighted: a JVM step costs a hundred embedded ones; about one per sequence.
    writers = (*EMBEDDED_WRITERS * 3, *JVM_WRITERS)
    size = GROUP if generated.mode() == "ci" else 6  # 300 sequences in CI, 6 otherwise

    def one(sequence: Any) -> None:
        shape, creator, steps = sequence
        with tempfile.TemporaryDirectory(prefix="deltasink-writers-") as root:
            world = World(shape, str(Path(root) / "t"), delta_spark.newSession())
            run_sequence(world, creator, steps)

    @generated.hypothesis_run(sample=1, ci=300 // GROUP)
    @given(
        st.lists(
            strategies(writers, ("rs", "rs", "rs", "spark"), max_steps=5),
            min_size=size,
            max_size=size,
        )
    )
    def run(sequences: list[Any]) -> None:
        with ThreadPoolExecutor(max_workers=4) as pool:
            for done in [pool.submit(one, s) for s in sequences]:
                done.result()

    with compaction_from(2):
        run()


@FULL
def test_delta_auto_compaction_after_a_coalesced_commit_is_not_a_second_commit(
    delta_spark: Any, tmp_path: Path
) -> None:
    """Delta's auto compaction (``delta.autoOptimize.autoCompact``) runs in the spark
    engine's session right after its commit and records that commit's ``userMetadata``:
    the ledger still has each version once, and the coalesced commit's own-snapshot
    check is made on the commit itself, not on the compaction."""
    from deltalake import write_deltalake

    target = str(tmp_path / "t")
    for i in range(6):  # small files for the compaction to take
        write_deltalake(target, id_rows(100 + i), mode="append")
    DeltaTable(target).alter.set_table_properties({"delta.autoOptimize.autoCompact": "true"})
    writer = DeltaSink(target, "app", MergeSpec(keys=["id"]), engine="spark", spark=delta_spark)
    writer.pre_commit(id_rows(1), 1)
    writer.pre_commit(id_rows(2), 2)
    assert writer.commit(2).committed_versions == [1, 2]
    operations = [
        support.commit_info(target, v).get("operation") for v in support.log_commits(target)
    ]
    assert "OPTIMIZE" in operations  # Delta compacted after the commit
    assert [e.versions for e in writer.history()] == [(1, 2)]
    assert support.marker(target, "app") == 2
