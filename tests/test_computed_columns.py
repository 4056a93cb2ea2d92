"""Computed columns of a table delta-spark made (issue 43): generated columns, column
defaults and identity columns, proven against delta-spark. The same batch goes through
plain delta-spark into a twin table and through each engine (the embedded engine fed
with ``pyarrow`` tables, the spark engine on the classic session) in ``insert`` (the
insert-only fast path), ``upsert`` (changing ``x`` of an existing key) and ``append``;
the rows are compared as Spark and as delta-rs read them, or the engine refuses by name
before anything is staged.

Like :mod:`tests.test_any_writer`, inside the full suite these tests run in the
delta-spark suite's own process (``CHILD_MODULES``). ``make test`` keeps two of them
(the spark engine's append, the carried identity refused on both engines; the embedded
engine's cases without a JVM are :mod:`tests.test_generated_embedded`);
``make test-delta-spark`` runs them all.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from deltasink import DeltaSink, MergeSpec
from deltasink.errors import InvalidInputError, UnsupportedTableFeatureError
from tests import support
from tests.test_contract_spark import DELTA_SPARK_MODULE, FULL, delta_spark, sliced

pytestmark = DELTA_SPARK_MODULE
__all__ = ["delta_spark"]

DEFAULTS = "TBLPROPERTIES ('delta.feature.allowColumnDefaults' = 'supported')"
SPECS = {
    "insert": MergeSpec(keys=["k"], mode="insert"),
    "upsert": MergeSpec(keys=["k"]),
    "append": MergeSpec(mode="append"),
}


@pytest.fixture
def pacific(delta_spark: Any) -> Iterator[Any]:
    """The classic session with the time zone of the issue's tables."""
    key = "spark.sql.session.timeZone"
    before = delta_spark.conf.get(key)
    delta_spark.conf.set(key, "America/Los_Angeles")
    yield delta_spark
    delta_spark.conf.set(key, before)


def make(spark: Any, path: str, columns: str, seed: str, extra: str = "") -> None:
    """A delta-spark table at ``path`` with ``columns``, holding the rows of ``seed``."""
    spark.sql(f"CREATE TABLE delta.`{path}` ({columns}) USING delta {extra}")
    spark.sql(f"INSERT INTO delta.`{path}` {seed}")


def twin_write(spark: Any, twin: str, rows: pa.Table, mode: str) -> None:
    """``rows`` written by plain delta-spark as each mode means it (omitted columns
    computed, or given their defaults, by Delta)."""
    names = rows.column_names
    spark.createDataFrame(rows.to_pandas()).createOrReplaceTempView("deltasink_twin_src")
    listed = ", ".join(names)
    values = ", ".join(f"s.{n}" for n in names)
    insert = f"WHEN NOT MATCHED THEN INSERT ({listed}) VALUES ({values})"
    update = "WHEN MATCHED THEN UPDATE SET " + ", ".join(f"{n} = s.{n}" for n in names)
    merge = f"MERGE INTO delta.`{twin}` t USING deltasink_twin_src s ON t.k = s.k "
    if mode == "append":
        spark.sql(f"INSERT INTO delta.`{twin}` ({listed}) SELECT {listed} FROM deltasink_twin_src")
    elif mode == "insert":
        spark.sql(merge + insert)
    else:
        spark.sql(merge + update + " " + insert)


def read_both(spark: Any, target: str, drop: str = "") -> tuple[list[Any], list[Any]]:
    """The target's rows as delta-spark and as delta-rs read them, sorted by ``k``."""
    frame = spark.read.format("delta").load(target)
    by_spark = [r.asDict() for r in frame.collect()]
    by_rs = DeltaTable(target).to_pyarrow_table().to_pylist()
    out = []
    for rows in (by_spark, by_rs):
        out.append(sorted(({c: v for c, v in r.items() if c != drop} for r in rows), key=str))
    return out[0], out[1]


def nothing_staged(staging: str) -> bool:
    """The staging table holds no version's rows."""
    if not os.path.exists(os.path.join(staging, "_delta_log")):
        return True
    return DeltaTable(staging).to_pyarrow_table().num_rows == 0


def sink(engine: str, spark: Any, target: str, staging: str, mode: str) -> DeltaSink:
    extra = {"spark": spark} if engine == "spark" else {}
    return DeltaSink(target, "app", SPECS[mode], engine=engine, staging=staging, **extra)


def through_both(
    spark: Any, tmp_path: Path, engine: str, mode: str, columns: str, seed: str, rows: pa.Table
) -> tuple[str, str]:
    """Target and twin made alike; ``rows`` written by the engine into the target and
    by plain delta-spark into the twin. Returns (target, twin)."""
    target, twin = str(tmp_path / "t"), str(tmp_path / "twin")
    make(spark, target, columns, seed, DEFAULTS if "DEFAULT" in columns else "")
    make(spark, twin, columns, seed, DEFAULTS if "DEFAULT" in columns else "")
    sink(engine, spark, target, str(tmp_path / "s"), mode).write(rows, 0)
    twin_write(spark, twin, rows, mode)
    return target, twin


KX = pa.schema([("k", pa.int64()), ("x", pa.int64())])
KX_ROWS = pa.Table.from_pylist([{"k": 1, "x": 30}, {"k": 2, "x": 11}], KX)
TIMES = pa.schema([("k", pa.int64()), ("ts", pa.timestamp("us", "UTC"))])
NIGHT = dt.datetime(2024, 3, 10, 5, 0, tzinfo=dt.timezone.utc)  # 2024-03-09 21:00 in LA

CASES = [(e, m) for e in ("embedded", "spark") for m in ("insert", "upsert", "append")]


@pytest.mark.parametrize(
    ("engine", "mode"),
    sliced(CASES, (("spark", "append"),)),
    ids=["-".join(c) for c in CASES],
)
def test_a_generated_column_the_batch_omits_is_computed_as_delta_spark_computes_it(
    delta_spark: Any, tmp_path: Path, engine: str, mode: str
) -> None:
    """``g BIGINT GENERATED ALWAYS AS (x * 2)``, the batch without ``g``: the insert-only
    fast path, the upsert that changes ``x`` of an existing key and the append all
    leave the rows plain delta-spark leaves (``g`` computed from the new ``x``)."""
    columns = "k BIGINT, x BIGINT, g BIGINT GENERATED ALWAYS AS (x * 2)"
    seed = "(k, x) VALUES (1, 10)" if mode == "upsert" else "(k, x) VALUES (0, 10)"
    target, twin = through_both(delta_spark, tmp_path, engine, mode, columns, seed, KX_ROWS)
    expected, _ = read_both(delta_spark, twin)
    assert read_both(delta_spark, target) == (expected, expected)
    assert all(r["g"] == 2 * r["x"] for r in expected)


@FULL
@pytest.mark.parametrize("engine", ["embedded", "spark"])
def test_a_generated_column_the_batch_carries_wrong_is_refused_before_staging(
    delta_spark: Any, tmp_path: Path, engine: str
) -> None:
    """A batch that carries ``g`` with a value other than ``x * 2`` (Delta would fail the
    commit on every try): refused by name, nothing staged, the target unchanged; the
    right value goes through."""
    target, staging = str(tmp_path / "t"), str(tmp_path / "s")
    make(
        delta_spark,
        target,
        "k BIGINT, x BIGINT, g BIGINT GENERATED ALWAYS AS (x * 2)",
        "(k, x) VALUES (0, 1)",
    )
    before = support.table_version(target)
    schema = pa.schema([("k", pa.int64()), ("x", pa.int64()), ("g", pa.int64())])
    wrong = pa.Table.from_pylist([{"k": 1, "x": 30, "g": 61}], schema)
    writer = sink(engine, delta_spark, target, staging, "upsert")
    with pytest.raises(InvalidInputError, match="generated column g"):
        writer.write(wrong, 0)
    assert nothing_staged(staging)
    assert support.table_version(target) == before
    writer.write(pa.Table.from_pylist([{"k": 1, "x": 30, "g": 60}], schema), 0)
    expected = [{"k": 0, "x": 1, "g": 2}, {"k": 1, "x": 30, "g": 60}]
    assert read_both(delta_spark, target) == (expected, expected)


SPARK_ONLY = [
    ("h DOUBLE GENERATED ALWAYS AS (x / 4)", "(k, x) VALUES (0, 2)", KX_ROWS),
    (
        "d DATE GENERATED ALWAYS AS (CAST(ts AS DATE))",
        "(k, ts) VALUES (0, TIMESTAMP'2024-01-01 00:00:00')",
        pa.Table.from_pylist([{"k": 1, "ts": NIGHT}], TIMES),
    ),
]


@FULL
@pytest.mark.parametrize("case", [0, 1], ids=["fractional-division", "date-of-timestamp"])
def test_a_generated_column_delta_rs_computes_otherwise_is_refused_on_embedded(
    pacific: Any, tmp_path: Path, case: int
) -> None:
    """``x / 4`` (delta-rs: integer division) and ``CAST(ts AS DATE)`` (delta-rs: in UTC,
    Spark: in the session's zone) are refused by the embedded engine by name, with the
    way out, before anything is staged; the spark engine writes what delta-spark
    writes."""
    column, seed, rows = SPARK_ONLY[case]
    source = "x BIGINT" if "x" in rows.column_names else "ts TIMESTAMP"
    columns = f"k BIGINT, {source}, {column}"
    target, staging = str(tmp_path / "t"), str(tmp_path / "s")
    make(pacific, target, columns, seed)
    before = support.table_version(target)
    with pytest.raises(UnsupportedTableFeatureError, match="engine='spark'"):
        sink("embedded", pacific, target, staging, "upsert").write(rows, 0)
    assert nothing_staged(staging)
    assert support.table_version(target) == before
    sink("spark", pacific, target, str(tmp_path / "s2"), "upsert").write(rows, 0)
    twin = str(tmp_path / "twin")
    make(pacific, twin, columns, seed)
    twin_write(pacific, twin, rows, "upsert")
    drop = "ts" if case == 1 else ""  # Spark reads it without a zone, delta-rs in UTC
    expected, _ = read_both(pacific, twin, drop=drop)
    assert read_both(pacific, target, drop=drop) == (expected, expected)
    if case == 1:
        assert [r["d"] for r in expected] == [dt.date(2024, 1, 1), dt.date(2024, 3, 9)]


@FULL
@pytest.mark.parametrize("mode", ["append", "insert", "upsert"])
def test_a_column_default_the_batch_omits_is_filled_as_delta_spark_fills_it(
    delta_spark: Any, tmp_path: Path, mode: str
) -> None:
    """``n INT DEFAULT 7``: the spark engine writes 7 where the batch has no ``n``, as
    plain delta-spark does; the embedded engine refuses the table by name (delta-rs
    does not write the ``allowColumnDefaults`` feature), nothing staged."""
    columns = "k BIGINT, x BIGINT, n INT DEFAULT 7"
    target, twin = through_both(
        delta_spark, tmp_path, "spark", mode, columns, "(k, x) VALUES (1, 10)", KX_ROWS
    )
    expected, _ = read_both(delta_spark, twin)
    assert read_both(delta_spark, target) == (expected, expected)
    assert {r["k"]: r["n"] for r in expected}[2] == 7


@FULL
def test_the_embedded_engine_refuses_column_defaults_by_name(
    delta_spark: Any, tmp_path: Path
) -> None:
    target, staging = str(tmp_path / "t"), str(tmp_path / "s")
    make(
        delta_spark,
        target,
        "k BIGINT, x BIGINT, n INT DEFAULT 7",
        "(k, x) VALUES (1, 10)",
        DEFAULTS,
    )
    with pytest.raises(UnsupportedTableFeatureError, match="allowColumnDefaults"):
        sink("embedded", delta_spark, target, staging, "append").write(KX_ROWS, 0)
    assert nothing_staged(staging)


@FULL
@pytest.mark.parametrize("mode", ["append", "insert", "upsert"])
def test_an_identity_column_the_batch_omits_is_generated_by_delta(
    delta_spark: Any, tmp_path: Path, mode: str
) -> None:
    """``id BIGINT GENERATED ALWAYS AS IDENTITY``: the spark engine leaves it to Delta
    (new rows get fresh ids, an updated row keeps its own), as plain delta-spark does."""
    columns = "id BIGINT GENERATED ALWAYS AS IDENTITY, k BIGINT, x BIGINT"
    target, twin = through_both(
        delta_spark, tmp_path, "spark", mode, columns, "(k, x) VALUES (1, 10)", KX_ROWS
    )
    expected, _ = read_both(delta_spark, twin, drop="id")
    assert read_both(delta_spark, target, drop="id") == (expected, expected)
    ids = [r["id"] for r in delta_spark.read.format("delta").load(target).collect()]
    assert None not in ids
    assert len(set(ids)) == len(ids)


def test_an_identity_column_the_batch_carries_is_refused_by_name(
    delta_spark: Any, tmp_path: Path
) -> None:
    """A batch that carries values for a ``GENERATED ALWAYS`` identity column (Delta
    refuses them): refused by name before staging, on both engines."""
    target = str(tmp_path / "t")
    columns = "id BIGINT GENERATED ALWAYS AS IDENTITY, k BIGINT, x BIGINT"
    make(delta_spark, target, columns, "(k, x) VALUES (1, 10)")
    schema = pa.schema([("id", pa.int64()), ("k", pa.int64()), ("x", pa.int64())])
    rows = pa.Table.from_pylist([{"id": 5, "k": 2, "x": 1}], schema)
    for engine, error in (("spark", InvalidInputError), ("embedded", UnsupportedTableFeatureError)):
        staging = str(tmp_path / f"s-{engine}")
        with pytest.raises(error, match="identity"):
            sink(engine, delta_spark, target, staging, "append").write(rows, 0)
        assert nothing_staged(staging)


@FULL
def test_a_default_set_after_staging_is_the_one_the_commit_fills(
    delta_spark: Any, tmp_path: Path
) -> None:
    """The definition is read again on the snapshot each commit is made on: a default
    set between ``pre_commit`` and ``commit`` fills the appended rows, as it fills a
    plain delta-spark ``INSERT`` made after it."""
    columns = "k BIGINT, x BIGINT, n INT"
    target, twin = str(tmp_path / "t"), str(tmp_path / "twin")
    for path in (target, twin):
        make(delta_spark, path, columns, "(k, x) VALUES (1, 10)", DEFAULTS)
    writer = sink("spark", delta_spark, target, str(tmp_path / "s"), "append")
    writer.pre_commit(KX_ROWS, 0)
    for path in (target, twin):
        delta_spark.sql(f"ALTER TABLE delta.`{path}` ALTER COLUMN n SET DEFAULT 7")
    writer.commit(0)
    twin_write(delta_spark, twin, KX_ROWS, "append")
    expected, _ = read_both(delta_spark, twin)
    assert read_both(delta_spark, target) == (expected, expected)
    assert [r["n"] for r in expected] == [None, 7, 7]
