"""A target's CHECK constraints and column mapping, as delta-spark makes them (issue 43,
item 6): a batch the table's definition can never take is refused by name before
anything is staged, on both engines, where it used to be staged and then fail at every
publish; what it takes is written as plain delta-spark writes it.

Every test runs on the delta-spark suite's classic session (the ``delta_spark``
fixture), beside the embedded engine fed with ``pyarrow`` tables; inside the full suite
these tests run in that suite's own process (``CHILD_MODULES``, see
``tests/test_contract_spark.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from deltasink import (
    CommitError,
    ConfigurationError,
    ConstraintViolationError,
    DeltaSink,
    MergeSpec,
    UnsupportedTableFeatureError,
)
from tests import support
from tests.test_any_writer import read_both
from tests.test_contract_spark import DELTA_SPARK_MODULE, FULL, delta_spark, sliced

pytestmark = DELTA_SPARK_MODULE
__all__ = ["delta_spark"]

SPECS = {
    "upsert": MergeSpec(keys=["id"]),
    "insert": MergeSpec(keys=["id"], mode="insert"),
    "append": MergeSpec(mode="append"),
    "delete_when": MergeSpec(keys=["id"], delete_when="gone"),
}


def make_table(
    spark: Any, target: str, columns: str, *, constraint: str | None, props: str = ""
) -> None:
    """The target, made by delta-spark: ``columns`` DDL, one ``CHECK`` constraint."""
    extra = f" TBLPROPERTIES ({props})" if props else ""
    spark.sql(f"CREATE TABLE delta.`{target}` ({columns}) USING delta{extra}")
    if constraint is not None:
        spark.sql(f"ALTER TABLE delta.`{target}` ADD CONSTRAINT c CHECK ({constraint})")


def sink(engine: str, spark: Any, target: str, spec: MergeSpec, app: str = "a") -> DeltaSink:
    extra = {"spark": spark} if engine == "spark" else {}
    return DeltaSink(target, app, spec, engine=engine, **extra)


_DDL = {pa.int64(): "bigint", pa.string(): "string", pa.bool_(): "boolean"}


def frame(engine: str, spark: Any, rows: list[dict[str, Any]], schema: pa.Schema) -> Any:
    """The batch: a Spark DataFrame for the spark engine, Arrow for the embedded one."""
    table = pa.Table.from_pylist(rows, schema)
    if engine != "spark":
        return table
    ddl = ", ".join(f"{f.name} {_DDL[f.type]}" for f in schema)
    return spark.createDataFrame([tuple(r.values()) for r in table.to_pylist()], ddl)


def nothing_staged(s: DeltaSink) -> None:
    status = s.status()
    assert status.pending_versions == []
    assert support.staged_files_on_disk(status.staging) == []


SCHEMA = pa.schema([("id", pa.int64()), ("x", pa.int64()), ("gone", pa.bool_())])
#: delete_when on Arrow input starts the embedded engine's Sail, a Spark Connect session,
#: which this process's classic session cannot share: the spark engine's case only.
CASES = [
    (e, m) for e in ("embedded", "spark") for m in SPECS if (e, m) != ("embedded", "delete_when")
]


@pytest.mark.parametrize(
    ("engine", "mode"),
    sliced(CASES, (("embedded", "upsert"), ("spark", "append"))),
    ids=[f"{e}-{m}" for e, m in CASES],
)
def test_a_batch_breaking_a_check_constraint_is_refused_before_anything_is_staged(
    delta_spark: Any, tmp_path: Path, engine: str, mode: str
) -> None:
    """``CHECK (x > 0)``: a batch with ``x = -1`` (and a null ``x``: Delta breaks a
    null result too) is refused by name, nothing staged, the target untouched; the
    fixed batch then writes what plain delta-spark's MERGE writes (a row the batch
    deletes is not judged)."""
    target, twin = str(tmp_path / "t"), str(tmp_path / "twin")
    for t in (target, twin):
        make_table(delta_spark, t, "id BIGINT, x BIGINT, gone BOOLEAN", constraint="x > 0")
    s = sink(engine, delta_spark, target, SPECS[mode])
    bad = [{"id": 1, "x": 5, "gone": False}, {"id": 2, "x": -1, "gone": False}]
    with pytest.raises(
        ConstraintViolationError,
        match=r"1 row\(s\) of version 0 break the CHECK constraint c \(x > 0\)",
    ) as info:
        s.write(frame(engine, delta_spark, bad, SCHEMA), 0)
    assert info.value.constraint == "c"
    nothing_staged(s)
    with pytest.raises(ConstraintViolationError, match="1 row"):
        s.write(frame(engine, delta_spark, [{"id": 3, "x": None, "gone": False}], SCHEMA), 0)
    nothing_staged(s)
    assert support.table_version(target) == 1  # CREATE, ADD CONSTRAINT: nothing since
    deletes = mode == "delete_when"  # a row the batch deletes is not judged
    good = [
        {"id": 1, "x": 5, "gone": False},
        {"id": 2, "x": -1 if deletes else 2, "gone": deletes},
        {"id": 3, "x": 7, "gone": False},
    ]
    s.write(frame(engine, delta_spark, good, SCHEMA), 0)
    frame("spark", delta_spark, good, SCHEMA).where("NOT gone").write.format("delta").mode(
        "append"
    ).save(twin)
    assert read_both(delta_spark, target) == read_both(delta_spark, twin)
    assert support.marker(target, "a") == 0


@pytest.mark.parametrize("engine", sliced(["embedded", "spark"], ("embedded",)))
def test_a_batch_without_a_constrained_column_breaks_it_as_an_insert_would(
    delta_spark: Any, tmp_path: Path, engine: str
) -> None:
    """A batch that lacks ``x`` (``allow_missing_columns``) inserts null there, which
    ``CHECK (x > 0)`` breaks in Delta (plain delta-spark refuses the same insert):
    refused by name, nothing staged."""
    target = str(tmp_path / "t")
    make_table(delta_spark, target, "id BIGINT, x BIGINT, v STRING", constraint="x > 0")
    with pytest.raises(Exception, match="DELTA_VIOLATE_CONSTRAINT"):
        delta_spark.sql(f"INSERT INTO delta.`{target}` (id, v) VALUES (9, 'plain')")
    s = sink(engine, delta_spark, target, MergeSpec(keys=["id"], allow_missing_columns=True))
    schema = pa.schema([("id", pa.int64()), ("v", pa.string())])
    with pytest.raises(ConstraintViolationError, match="CHECK constraint c"):
        s.write(frame(engine, delta_spark, [{"id": 1, "v": "a"}], schema), 0)
    nothing_staged(s)


def test_delta_rs_reading_a_constraint_otherwise_is_refused_with_the_way_out(
    delta_spark: Any, tmp_path: Path
) -> None:
    """``CHECK (x / 4 > 1)``: Spark divides as doubles (5 / 4 = 1.25 keeps it), delta-rs
    as integers (1, breaks it) and would fail every commit of ``x = 5``: the embedded
    engine refuses the batch by name, naming ``engine='spark'``; the spark engine writes
    it as plain delta-spark does."""
    target = str(tmp_path / "t")
    make_table(delta_spark, target, "id BIGINT, x BIGINT", constraint="x / 4 > 1")
    delta_spark.sql(f"INSERT INTO delta.`{target}` VALUES (0, 8)")  # 2.0 > 1: kept
    schema = pa.schema([("id", pa.int64()), ("x", pa.int64())])
    embedded = sink("embedded", delta_spark, target, SPECS["upsert"])
    with pytest.raises(UnsupportedTableFeatureError, match="engine='spark'") as info:
        embedded.write(pa.Table.from_pylist([{"id": 1, "x": 5}], schema), 0)
    assert info.value.features == ["checkConstraints"]
    nothing_staged(embedded)
    with pytest.raises(ConstraintViolationError):  # Spark's meaning breaks it: refused
        embedded.write(pa.Table.from_pylist([{"id": 1, "x": 4}], schema), 0)
    sink("spark", delta_spark, target, SPECS["upsert"], app="s").write(
        frame("spark", delta_spark, [{"id": 1, "x": 5}], schema), 0
    )
    expected = [(0, 8), (1, 5)]
    assert read_both(delta_spark, target) == (expected, expected)


def test_a_constraint_added_after_staging_is_named_at_commit(
    delta_spark: Any, tmp_path: Path
) -> None:
    """A constraint added between ``pre_commit`` and ``commit`` is judged on the
    snapshot the commit is made on: the commit fails naming it (the version stays
    staged, untouched target), and once the version is aborted the next one writes."""
    target = str(tmp_path / "t")
    make_table(delta_spark, target, "id BIGINT, x BIGINT", constraint=None)
    schema = pa.schema([("id", pa.int64()), ("x", pa.int64())])
    s = sink("embedded", delta_spark, target, SPECS["upsert"])
    s.pre_commit(pa.Table.from_pylist([{"id": 1, "x": -1}], schema), 0)
    delta_spark.sql(f"ALTER TABLE delta.`{target}` ADD CONSTRAINT c CHECK (x > 0)")
    with pytest.raises(CommitError, match=r"break the CHECK constraint c \(x > 0\)") as info:
        s.commit(0)
    assert isinstance(info.value.__cause__, ConstraintViolationError)
    assert s.status().pending_versions == [0]
    assert support.rows(target) == []
    s.abort(0)
    s.write(pa.Table.from_pylist([{"id": 2, "x": 3}], schema), 1)
    assert read_both(delta_spark, target) == ([(2, 3)], [(2, 3)])


@pytest.mark.parametrize("engine", sliced(["embedded", "spark"], ("embedded",)))
def test_an_upsert_writing_part_of_a_constraint_is_refused_by_name(
    delta_spark: Any, tmp_path: Path, engine: str
) -> None:
    """``CHECK (lo < hi)`` with ``update_columns=["lo"]``: a matched row keeps its
    ``hi``, so the batch alone cannot tell whether the row keeps the constraint:
    refused by name before anything is staged."""
    target = str(tmp_path / "t")
    make_table(delta_spark, target, "id BIGINT, lo BIGINT, hi BIGINT", constraint="lo < hi")
    schema = pa.schema([("id", pa.int64()), ("lo", pa.int64()), ("hi", pa.int64())])
    s = sink(engine, delta_spark, target, MergeSpec(keys=["id"], update_columns=["lo"]))
    with pytest.raises(ConfigurationError, match=r"writes on a matched row and \['hi'\]"):
        s.write(frame(engine, delta_spark, [{"id": 1, "lo": 1, "hi": 2}], schema), 0)
    nothing_staged(s)


@pytest.mark.parametrize("new_column", [False, pytest.param(True, marks=FULL)])
def test_schema_evolution_on_a_column_mapped_target(
    delta_spark: Any, tmp_path: Path, new_column: bool
) -> None:
    """``schema_evolution=True`` on a column-mapped target (delta-rs cannot evolve its
    schema): a batch that fits the target is written as plain delta-spark writes it; one
    with a new column is refused by name on the embedded engine, nothing staged, and
    written by the spark engine."""
    target, twin = str(tmp_path / "t"), str(tmp_path / "twin")
    for t in (target, twin):
        make_table(
            delta_spark, t, "id BIGINT, x BIGINT", constraint=None,
            props="'delta.columnMapping.mode' = 'name'",
        )  # fmt: skip
    spec = MergeSpec(keys=["id"], schema_evolution=True)
    fields = [("id", pa.int64()), ("x", pa.int64())] + ([("y", pa.string())] if new_column else [])
    rows = [{"id": 1, "x": 5, "y": "n"}, {"id": 2, "x": 6, "y": "m"}]
    batch = pa.Table.from_pylist(rows, pa.schema(fields))
    embedded = sink("embedded", delta_spark, target, spec)
    if new_column:
        with pytest.raises(UnsupportedTableFeatureError, match="column mapping") as info:
            embedded.write(batch, 0)
        assert info.value.features == ["columnMapping"]
        nothing_staged(embedded)
        sink("spark", delta_spark, target, spec, app="s").write(
            frame("spark", delta_spark, rows, pa.schema(fields)), 0
        )
    else:
        embedded.write(batch, 0)
        embedded.write(pa.Table.from_pylist([{"id": 2, "x": 7}], batch.schema), 1)
    delta_spark.sql("SET spark.databricks.delta.schema.autoMerge.enabled = true")
    try:
        for i, part in enumerate(([0, 1], [1]) if not new_column else ([0, 1],)):
            update = [dict(rows[j], x=7) if i else rows[j] for j in part]
            delta_spark.createDataFrame(
                pa.Table.from_pylist(update, batch.schema).to_pandas()
            ).createOrReplaceTempView("src")
            delta_spark.sql(
                f"MERGE INTO delta.`{twin}` t USING src s ON t.id = s.id "
                "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
            )
    finally:
        delta_spark.sql("SET spark.databricks.delta.schema.autoMerge.enabled = false")
    assert read_both(delta_spark, target) == read_both(delta_spark, twin)


@pytest.mark.parametrize("engine", sliced(["embedded", "spark"], ("embedded",)))
def test_a_constraint_over_a_generated_column_judges_the_value_the_commit_computes(
    delta_spark: Any, tmp_path: Path, engine: str
) -> None:
    """``g BIGINT GENERATED ALWAYS AS (x * 2)`` with ``CHECK (g < 10)``, batches without
    ``g``: ``x = 7`` (``g = 14``) is refused by name before staging, ``x = 3`` and then
    an upsert of the same key to ``x = 4`` are written as plain delta-spark writes them
    (the constraint judged on the computed ``g``, not on a missing one)."""
    target, twin = str(tmp_path / "t"), str(tmp_path / "twin")
    ddl = "id BIGINT, x BIGINT, g BIGINT GENERATED ALWAYS AS (x * 2)"
    for t in (target, twin):
        make_table(delta_spark, t, ddl, constraint="g < 10")
    schema = pa.schema([("id", pa.int64()), ("x", pa.int64())])
    s = sink(engine, delta_spark, target, SPECS["upsert"])
    with pytest.raises(ConstraintViolationError, match=r"CHECK constraint c \(g < 10\)"):
        s.write(frame(engine, delta_spark, [{"id": 1, "x": 3}, {"id": 2, "x": 7}], schema), 0)
    nothing_staged(s)
    s.write(frame(engine, delta_spark, [{"id": 1, "x": 3}], schema), 0)
    s.write(frame(engine, delta_spark, [{"id": 1, "x": 4}, {"id": 2, "x": 1}], schema), 1)
    delta_spark.sql(f"INSERT INTO delta.`{twin}` (id, x) VALUES (1, 4), (2, 1)")
    assert read_both(delta_spark, target) == read_both(delta_spark, twin)
    assert read_both(delta_spark, target)[0] == [(1, 4, 8), (2, 1, 2)]


@pytest.mark.parametrize("engine", sliced(["embedded", "spark"], ("spark",)))
def test_an_insert_judges_only_the_rows_it_writes(
    delta_spark: Any, tmp_path: Path, engine: str
) -> None:
    """``mode='insert'``: a row whose key the target holds is not written (Delta's MERGE
    has no matched clause), so its ``x = -1`` breaks nothing; delta-spark's own MERGE
    takes the batch and so does each engine (found by the table zoo, seeds 1506879131
    and 1637602614: the batch was refused). A new key's ``x = -1`` is still refused."""
    target, twin = str(tmp_path / "t"), str(tmp_path / "twin")
    first = [{"id": 1, "x": 5, "gone": False}]
    for t in (target, twin):
        make_table(delta_spark, t, "id BIGINT, x BIGINT, gone BOOLEAN", constraint="x > 0")
        frame("spark", delta_spark, first, SCHEMA).write.format("delta").mode("append").save(t)
    s = sink(engine, delta_spark, target, SPECS["insert"])
    batch = [{"id": 1, "x": -1, "gone": False}, {"id": 2, "x": 3, "gone": False}]
    s.write(frame(engine, delta_spark, batch, SCHEMA), 0)
    frame("spark", delta_spark, batch, SCHEMA).createOrReplaceTempView("b")
    delta_spark.sql(
        f"MERGE INTO delta.`{twin}` t USING b s ON t.id = s.id WHEN NOT MATCHED THEN INSERT *"
    )
    assert read_both(delta_spark, target) == read_both(delta_spark, twin)
    assert sorted(r["id"] for r in support.rows(target)) == [1, 2]
    with pytest.raises(ConstraintViolationError, match="1 row"):
        s.write(frame(engine, delta_spark, [{"id": 4, "x": -1, "gone": False}], SCHEMA), 1)
    nothing_staged(s)
