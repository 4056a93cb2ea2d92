"""Timestamps every reader reads alike after the embedded engine (issue 43, items 3
and 5), proven against delta-spark on tables it made in ``America/Los_Angeles``.

- INT96 timestamps the log's statistics cannot show (in an array, a map, a struct in
  an array; a column beyond the statistics columns) are read from the files: a write
  that would rewrite such a file is refused by name only when a value lies outside
  1677-2262, and otherwise every value survives exactly.
- A ``TIMESTAMP`` partition column is refused by name by the embedded engine (delta-rs
  records its values without a zone, which Spark reads in its session zone) and written
  by the spark engine in the protocol's UTC form; ``TIMESTAMP_NTZ`` partition values
  (zone-less) are read alike by Spark in any session zone and delta-rs; files under
  escaped partition directories open.

Every test runs on the delta-spark suite's classic session (the ``delta_spark``
fixture, UTC), its session zone set to Los Angeles for the table making and back
afterwards; inside the full suite this module runs in that suite's own process
(``CHILD_MODULES``).
"""

from __future__ import annotations

import datetime as dt
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from deltasink import DeltaSink, MergeSpec, UnsupportedTableFeatureError
from tests import support
from tests.test_contract_spark import DELTA_SPARK_MODULE, FULL, delta_spark, sliced

pytestmark = DELTA_SPARK_MODULE
__all__ = ["delta_spark"]

ZONE = "spark.sql.session.timeZone"
LA = "America/Los_Angeles"
UTC = dt.timezone.utc


def zone(spark: Any, name: str) -> AbstractContextManager[None]:
    """The session time zone ``name`` inside, the previous one restored after."""
    return support.spark_conf(spark, ZONE, name)


def micros(value: dt.datetime) -> int:
    return (value - dt.datetime(1970, 1, 1, tzinfo=UTC)) // dt.timedelta(microseconds=1)


# -- item 3: INT96 timestamps statistics cannot show --------------------------------------

#: Table shapes whose timestamp ``h`` the log's statistics leave out (Spark's INT96):
#: DDL columns, table properties, and the SQL of a row holding the instant ``{t}``.
#: Each also has ``s``, an indexed timestamp column, so statistics exist for some.
HIDDEN = {
    "array": ("h array<timestamp>", "", "array({t})"),
    "map": ("h map<string, timestamp>", "", "map('k', {t})"),
    "struct-in-array": ("h array<struct<t: timestamp>>", "", "array(named_struct('t', {t}))"),
    "40th-column": (
        ", ".join(f"c{i} int" for i in range(37)) + ", h timestamp",
        "",
        ", ".join(["0"] * 37) + ", {t}",
    ),
    "numIndexedCols": ("h timestamp", "'delta.dataSkippingNumIndexedCols' = '2'", "{t}"),
    "statsColumns": ("h timestamp", "'delta.dataSkippingStatsColumns' = 'id,s'", "{t}"),
}

IN_RANGE = ["TIMESTAMP'1677-09-22 00:00:00.000001Z'", "TIMESTAMP'2262-04-10 23:59:59.999999Z'"]
OUTSIDE = ["TIMESTAMP'0001-01-01 00:00:00Z'", "TIMESTAMP'9999-12-31 23:59:59.999999Z'"]


def hidden_table(spark: Any, target: str, shape: str) -> None:
    """The ``shape`` table, made by delta-spark (INT96) in Los Angeles, with rows 1 and
    2 in one file: ``h`` holds the in-range edges."""
    columns, props, value = HIDDEN[shape]
    tblprops = f" TBLPROPERTIES ({props})" if props else ""
    with zone(spark, LA):
        spark.sql(
            f"CREATE TABLE delta.`{target}` (id long, s timestamp, {columns}, v string) "
            f"USING delta{tblprops}"
        )
        rows = [
            f"SELECT {i}L, TIMESTAMP'2020-01-01 00:00:00Z', {value.format(t=t)}, 'a'"
            for i, t in ((1, IN_RANGE[0]), (2, IN_RANGE[1]))
        ]
        names = spark.read.format("delta").load(target).columns
        frame = spark.sql(" UNION ALL ".join(rows)).coalesce(1).toDF(*names)
        frame.write.format("delta").mode("append").save(target)


def spark_rows(spark: Any, target: str) -> list[tuple[Any, ...]]:
    """``(id, the table's other columns as text, v)`` as delta-spark reads them, in UTC."""
    with zone(spark, "UTC"):
        columns = spark.read.format("delta").load(target).columns
        stamp = "map('timestampFormat', 'yyyy-MM-dd HH:mm:ss.SSSSSS')"
        text = [f"to_json(struct({c}), {stamp}) AS {c}" for c in columns if c not in ("id", "v")]
        query = f"SELECT id, {', '.join(text)} FROM delta.`{target}`"
        return sorted(tuple(r) for r in spark.sql(query).collect())


def rs_rows(target: str) -> list[dict[str, Any]]:
    """The rows as delta-rs reads them, by ``id``."""
    return sorted(DeltaTable(target).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])


def edit(schema: pa.Schema, ids: list[int], note: str) -> pa.Table:
    """A batch of rows ``ids``: ``v`` set to ``note``, the other columns null."""
    rows = [{**{f.name: None for f in schema}, "id": i, "v": note} for i in ids]
    return pa.Table.from_pylist(rows, schema)


def outside_rows(spark: Any, target: str, shape: str) -> None:
    """Rows 3 and 4, one file, whose ``h`` holds 0001-01-01 and 9999-12-31 (delta-spark)."""
    _, _, value = HIDDEN[shape]
    rows = [
        f"SELECT {i}L, TIMESTAMP'2020-01-01 00:00:00Z', {value.format(t=t)}, 'a'"
        for i, t in ((3, OUTSIDE[0]), (4, OUTSIDE[1]))
    ]
    with zone(spark, LA):
        names = spark.read.format("delta").load(target).columns
        frame = spark.sql(" UNION ALL ".join(rows)).coalesce(1).toDF(*names)
        frame.write.format("delta").mode("append").save(target)


MODES = {
    "upsert": MergeSpec(keys=["id"]),
    "replace": MergeSpec(mode="replace", replace_by=["id"]),
}


@FULL  # make test: tests/test_embedded.py::test_int96_in_an_array_beside_indexed_timestamps_is_read_not_trusted
@pytest.mark.parametrize("shape", list(HIDDEN))
def test_int96_timestamps_statistics_cannot_show_survive_or_are_refused_by_name(
    delta_spark: Any, tmp_path: Path, shape: str
) -> None:
    """Spark's INT96 ``h`` where no statistics reach: values inside 1677-2262 survive an
    embedded upsert of another row of their file exactly (read by Spark, before and
    after); once Spark adds a file holding 0001-01-01 and 9999-12-31 there, the next
    upsert is refused by name and nothing is written."""
    from deltasink.backends.deltalog.tables import arrow_schema

    target = str(tmp_path / "t")
    hidden_table(delta_spark, target, shape)
    by_spark, by_rs = spark_rows(delta_spark, target), rs_rows(target)
    schema = arrow_schema(DeltaTable(target))
    sink = DeltaSink(target, "up", MergeSpec(keys=["id"]), engine="embedded")
    sink.write(edit(schema, [2], "b"), 0)  # rewrites row 1's file
    assert spark_rows(delta_spark, target)[0] == by_spark[0]
    assert rs_rows(target)[0] == by_rs[0]
    assert [r["v"] for r in rs_rows(target)] == ["a", "b"]
    outside_rows(delta_spark, target, shape)
    version = support.table_version(target)
    with pytest.raises(UnsupportedTableFeatureError, match="INT96") as raised:
        sink.write(edit(schema, [3], "c"), 1)
    assert raised.value.features == ["INT96 timestamps outside 1677-2262"]
    assert support.table_version(target) == version
    assert support.marker(target, "up") == 0


@FULL
@pytest.mark.parametrize("mode", list(MODES))
def test_every_mode_that_rewrites_files_refuses_hidden_int96_outside_the_range(
    delta_spark: Any, tmp_path: Path, mode: str
) -> None:
    """``upsert`` and ``replace`` rewrite the file of the row they touch:
    each is refused by name when a timestamp in an array of a Spark file holds
    0001-01-01, nothing written; the values read back exactly in Spark."""
    from deltasink.backends.deltalog.tables import arrow_schema

    target = str(tmp_path / "t")
    hidden_table(delta_spark, target, "array")
    outside_rows(delta_spark, target, "array")
    before = spark_rows(delta_spark, target)
    assert before[2][2] == '{"h":["0001-01-01 00:00:00.000000"]}'
    schema = arrow_schema(DeltaTable(target))
    version = support.table_version(target)
    sink = DeltaSink(target, "w", MODES[mode], engine="embedded")
    with pytest.raises(UnsupportedTableFeatureError, match="INT96"):
        sink.write(edit(schema, [4], "DEL"), 0)
    assert support.table_version(target) == version
    assert spark_rows(delta_spark, target) == before


# -- item 5: TIMESTAMP and TIMESTAMP_NTZ partition columns -------------------------------

#: ``(id, ts, ntz)``: the instants of ``ts`` (UTC) and the wall clocks of ``ntz``. Spark
#: writes rows 1-4 in Los Angeles; 0001-01-01 and 9999-12-31 (in UTC), a sub-millisecond
#: value, the hour of the DST change.
FIRST = [
    (1, "2024-01-01 20:00:00", "2024-01-01 12:00:00"),
    (2, "0001-01-01 00:00:00", "0001-01-01 00:00:00"),
    (3, "9999-12-31 23:59:59.999999", "9999-12-31 23:59:59.999999"),
    (4, "2024-03-10 10:30:00.000001", "2024-03-10 03:30:00.000001"),
]
#: As :data:`FIRST` for a table partitioned by ``ntz`` alone, where ``ts`` is a data
#: column Spark stores as INT96: its values within 1677-2262, which the embedded engine
#: rewrites exactly (outside, the INT96 guard refuses the write by name).
FIRST_NTZ = [
    (1, "2024-01-01 20:00:00", "2024-01-01 12:00:00"),
    (2, "1700-01-01 00:00:00", "0001-01-01 00:00:00"),
    (3, "2262-01-01 23:59:59.999999", "9999-12-31 23:59:59.999999"),
    (4, "2024-03-10 10:30:00.000001", "2024-03-10 03:30:00.000001"),
]
# Not 02:30 for ``ntz`` on 2024-03-10: delta-spark 4.4 itself reads that zone-less
# wall clock (absent in Los Angeles, the DST gap) back as 03:30 in a Los Angeles session.
#: What the embedded engine writes: row 1 updated in place; new partitions at both
#: 01:30s of the night summer time ends in Los Angeles (08:30Z and 09:30Z), a
#: sub-millisecond instant, and 0001-01-01 / 9999-12-31 again.
SECOND = [
    (1, "2024-01-01 20:00:00", "2024-01-01 12:00:00"),
    (5, "2024-11-03 08:30:00", "2024-11-03 01:30:00"),
    (6, "2024-11-03 09:30:00.000999", "2024-11-03 01:30:00.000999"),
    (7, "0001-01-01 00:00:00", "0001-01-01 00:00:00"),
    (8, "9999-12-31 23:59:59.999999", "9999-12-31 23:59:59.999999"),
]
PARTS = pa.schema(
    [
        ("id", pa.int64()),
        ("ts", pa.timestamp("us", "UTC")),
        ("ntz", pa.timestamp("us")),
        ("v", pa.string()),
        # a timestamp no statistics show: the INT96 guard opens every file (its path
        # decoded once: the partition directories are escaped)
        ("h", pa.list_(pa.timestamp("us", "UTC"))),
    ]
)


def instant(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=UTC)


def parts_batch(rows: list[tuple[int, str, str]], note: str) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {"id": i, "ts": instant(t), "ntz": dt.datetime.fromisoformat(n), "v": note, "h": None}
            for i, t, n in rows
        ],
        PARTS,
    )


def spark_parts_table(spark: Any, target: str) -> None:
    """The table partitioned by ``ts`` and ``ntz``, rows :data:`FIRST`, by delta-spark in
    Los Angeles (its partition directories escaped, ``ts`` recorded in UTC form)."""
    rows = " UNION ALL ".join(
        f"SELECT {i}L AS id, TIMESTAMP'{t}Z' AS ts, TIMESTAMP_NTZ'{n}' AS ntz, 'a' AS v, "
        "array(TIMESTAMP'2020-01-01 00:00:00Z') AS h"
        for i, t, n in FIRST
    )
    with zone(spark, LA):
        frame = spark.sql(rows)
        frame.write.format("delta").partitionBy("ts", "ntz").save(target)


def read_parts(spark: Any, target: str) -> dict[str, list[tuple[Any, ...]]]:
    """``(id, ts as epoch microseconds, ntz as text, v)`` as delta-spark reads them in Los
    Angeles and in UTC, and as delta-rs reads them."""
    found = {}
    for name in (LA, "UTC"):
        with zone(spark, name):
            text = "date_format(ntz, 'yyyy-MM-dd HH:mm:ss.SSSSSS')"
            query = f"SELECT id, unix_micros(ts), {text}, v FROM delta.`{target}`"
            found[name] = sorted(tuple(r) for r in spark.sql(query).collect())
    by_rs = sorted(DeltaTable(target).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])
    found["delta-rs"] = [
        (r["id"], micros(r["ts"]), r["ntz"].strftime("%Y-%m-%d %H:%M:%S.%f").rjust(26, "0"), r["v"])
        for r in by_rs
    ]
    return found


def expected_parts(*batches: tuple[list[tuple[int, str, str]], str]) -> list[tuple[Any, ...]]:
    rows: dict[int, tuple[Any, ...]] = {}
    for batch, note in batches:
        for i, t, n in batch:
            wall = dt.datetime.fromisoformat(n).strftime("%Y-%m-%d %H:%M:%S.%f").rjust(26, "0")
            rows[i] = (i, micros(instant(t)), wall, note)
    return [rows[i] for i in sorted(rows)]


def recorded_ts(target: str) -> list[str]:
    """The ``ts`` partition values of the live files, as the log records them."""
    live: dict[str, str] = {}
    for actions in support.log_commits(target).values():
        for action in actions:
            if "add" in action:
                live[action["add"]["path"]] = action["add"]["partitionValues"]["ts"]
            elif "remove" in action:
                live.pop(action["remove"]["path"], None)
    return sorted(live.values())


#: The modes that write files (``delete_when`` left out: on Arrow input the embedded
#: engine evaluates it on its Sail session, a Spark Connect one, which this process's
#: classic session cannot share).
PART_MODES = {
    "upsert": MergeSpec(keys=["id"]),
    "append": MergeSpec(mode="append"),
    "replace": MergeSpec(mode="replace", replace_by=["id"]),
}


def spark_batch(spark: Any, rows: list[tuple[int, str, str]], note: str) -> Any:
    """``rows`` as a Spark DataFrame of :data:`PARTS`'s columns, from SQL literals (an
    Arrow table in a Los Angeles session loses the repeated hour of the night summer
    time ends, in PySpark's own conversion)."""
    return spark.sql(
        " UNION ALL ".join(
            f"SELECT {i}L AS id, TIMESTAMP'{t}Z' AS ts, TIMESTAMP_NTZ'{n}' AS ntz, "
            f"'{note}' AS v, CAST(NULL AS ARRAY<TIMESTAMP>) AS h"
            for i, t, n in rows
        )
    )


def spark_ntz_table(spark: Any, target: str) -> None:
    """As :func:`spark_parts_table`, partitioned by ``ntz`` alone (rows :data:`FIRST_NTZ`)."""
    rows = " UNION ALL ".join(
        f"SELECT {i}L AS id, TIMESTAMP'{t}Z' AS ts, TIMESTAMP_NTZ'{n}' AS ntz, 'a' AS v, "
        "array(TIMESTAMP'2020-01-01 00:00:00Z') AS h"
        for i, t, n in FIRST_NTZ
    )
    with zone(spark, LA):
        spark.sql(rows).write.format("delta").partitionBy("ntz").save(target)


def nothing_staged(sink: DeltaSink) -> None:
    status = sink.status()
    assert status.pending_versions == []
    assert support.staged_files_on_disk(status.staging) == []


@pytest.mark.parametrize("mode", sliced(list(PART_MODES), ("upsert",)))
def test_a_timestamp_partitioned_target_is_refused_by_the_embedded_engine_and_written_by_spark(
    delta_spark: Any, tmp_path: Path, mode: str
) -> None:
    """A table delta-spark partitioned by ``ts TIMESTAMP, ntz TIMESTAMP_NTZ`` in Los
    Angeles (URI-escaped partition directories): delta-rs would record ``ts`` without a
    zone, which Spark reads in its session zone (hours off in Los Angeles), so the
    embedded engine refuses it by name before anything is staged, the target
    untouched; the spark engine writes the same batch, and Spark in Los Angeles, Spark in
    UTC and delta-rs read every instant and wall clock exactly as written, every ``ts``
    value recorded in the UTC form."""
    target = str(tmp_path / "t")
    spark_parts_table(delta_spark, target)
    assert read_parts(delta_spark, target)[LA] == expected_parts((FIRST, "a"))
    rows = SECOND if mode != "append" else SECOND[1:]
    embedded = DeltaSink(target, "w", PART_MODES[mode], engine="embedded")
    with pytest.raises(
        UnsupportedTableFeatureError, match=r"TIMESTAMP column\(s\) \['ts'\]"
    ) as info:
        embedded.write(parts_batch(rows, "b"), 0)
    assert info.value.features == ["timestampPartitionColumn"]
    nothing_staged(embedded)
    assert support.table_version(target) == 0
    spark = DeltaSink(target, "s", PART_MODES[mode], engine="spark", spark=delta_spark)
    spark.write(spark_batch(delta_spark, rows, "b"), 0)
    expected = expected_parts((FIRST, "a"), (rows, "b"))
    found = read_parts(delta_spark, target)
    assert found == {LA: expected, "UTC": expected, "delta-rs": expected}
    assert all(v.endswith("Z") for v in recorded_ts(target))
    assert support.marker(target, "s") == 0


@pytest.mark.parametrize("mode", sliced(list(PART_MODES), ("upsert",)))
def test_timestamp_ntz_partition_values_read_alike_in_any_session_zone(
    delta_spark: Any, tmp_path: Path, mode: str
) -> None:
    """A table delta-spark partitioned by ``ntz TIMESTAMP_NTZ`` in Los Angeles
    (URI-escaped partition directories, which the INT96 guard opens decoded once: no
    StorageError): the embedded engine writes into it, and Spark in Los Angeles, Spark in
    UTC and delta-rs read every instant and wall clock exactly as written."""
    target = str(tmp_path / "t")
    spark_ntz_table(delta_spark, target)
    rows = SECOND if mode != "append" else SECOND[1:]
    DeltaSink(target, "w", PART_MODES[mode], engine="embedded").write(parts_batch(rows, "b"), 0)
    expected = expected_parts((FIRST_NTZ, "a"), (rows, "b"))
    found = read_parts(delta_spark, target)
    assert found == {LA: expected, "UTC": expected, "delta-rs": expected}
    assert support.marker(target, "w") == 0


@FULL
def test_a_target_the_embedded_engine_would_create_with_a_timestamp_partition_is_refused(
    delta_spark: Any, tmp_path: Path
) -> None:
    """``TableSpec(partition_by=["ts", "ntz"])`` with a ``TIMESTAMP`` ``ts``: refused by
    name, no target made, nothing staged; by ``ntz`` alone the embedded engine creates
    and upserts it, Spark (Los Angeles, UTC) and delta-rs read the same values, and
    delta-spark's own MERGE in Los Angeles then finds the keys (one row each)."""
    from deltasink import TableSpec

    target = str(tmp_path / "t")
    both = DeltaSink(
        target, "w", MergeSpec(keys=["id"]), engine="embedded",
        table=TableSpec(partition_by=["ts", "ntz"]),
    )  # fmt: skip
    with pytest.raises(UnsupportedTableFeatureError, match="would partition by"):
        both.write(parts_batch(FIRST, "a"), 0)
    assert not support.exists(target)
    nothing_staged(both)
    layout = TableSpec(partition_by=["ntz"])
    sink = DeltaSink(target, "w", MergeSpec(keys=["id"]), engine="embedded", table=layout)
    sink.write(parts_batch(FIRST, "a"), 0)
    sink.write(parts_batch(SECOND, "b"), 1)
    expected = expected_parts((FIRST, "a"), (SECOND, "b"))
    assert read_parts(delta_spark, target) == {LA: expected, "UTC": expected, "delta-rs": expected}
    with zone(delta_spark, LA):
        delta_spark.sql(
            f"MERGE INTO delta.`{target}` t USING (SELECT 5L AS id, "
            "TIMESTAMP_NTZ'2024-11-03 01:30:00' AS ntz) s ON t.id = s.id AND t.ntz = s.ntz "
            "WHEN MATCHED THEN UPDATE SET v = 'c'"
        )
    assert [r[3] for r in read_parts(delta_spark, target)["UTC"] if r[0] == 5] == ["c"]
