"""The Spark backend's MERGE, run for real on the embedded engine (Sail), against the
embedded backend's delta-rs MERGE of the same MergeSpec: identical resulting tables.

Both sides start from the same state, written by the embedded backend, which also
stages the later batches (the staging layout is shared). The Spark side then runs
exactly the SQL :class:`~deltasink.backends.spark.SparkBackend` generates
(``source_sql`` over the real staging table, ``merge_sql`` from the shared
:class:`~deltasink.shapes.merge.MergePlan`, with the ``key_prune`` key-range predicate) on
Sail, which executes ``MERGE INTO`` but does not write ``txn`` markers; the markers
are covered by the Delta-enabled suite.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from deltalake import DeltaTable

from deltasink import DeltaSink, MergeSpec
from deltasink.backends.spark.prune import key_prune
from deltasink.backends.spark.sources import guarded, merge_sql, source_sql
from deltasink.backends.spark.tables import table_ref
from deltasink.shapes.target_sql import TargetSql
from tests import support


@dataclass(frozen=True)
class Case:
    spec: MergeSpec
    batches: tuple[pa.Table, ...]
    expected: tuple[dict[str, Any], ...]
    columns: tuple[tuple[str, ...], ...] = ()  # per later batch, when it omits columns
    clear_sequence: bool = False  # another tool nulls the target's sequence after v0


def t(**columns: list[Any]) -> pa.Table:
    return pa.table(columns)


UPSERT = MergeSpec(keys=["id"])
SEQ = MergeSpec(keys=["id"], sequence_by="ts")
DEL = MergeSpec(keys=["id"], delete_when="op = 'D'")
SEQ_DEL = MergeSpec(keys=["id"], sequence_by="ts", delete_when="op = 'D'")
INSERT = MergeSpec(keys=["id"], mode="insert")

CASES = {
    "upsert": Case(
        UPSERT,
        (t(id=[1, 2], value=["a", "b"]), t(id=[2, 3], value=["B", "c"])),
        ({"id": 1, "value": "a"}, {"id": 2, "value": "B"}, {"id": 3, "value": "c"}),
    ),
    "upsert-latest-version-wins": Case(
        UPSERT,
        (t(id=[1], value=["a"]), t(id=[1, 2], value=["x", "b"]), t(id=[1], value=["y"])),
        ({"id": 1, "value": "y"}, {"id": 2, "value": "b"}),
    ),
    "insert-never-changes-existing-rows": Case(
        INSERT,
        (t(id=[1], value=["first"]), t(id=[1, 2], value=["second", "new"])),
        ({"id": 1, "value": "first"}, {"id": 2, "value": "new"}),
    ),
    "insert-first-version-wins": Case(
        INSERT,
        (t(id=[0], value=["z"]), t(id=[1], value=["first"]), t(id=[1, 2], value=["later", "b"])),
        ({"id": 0, "value": "z"}, {"id": 1, "value": "first"}, {"id": 2, "value": "b"}),
    ),
    "insert-nothing-new": Case(
        INSERT,
        (t(id=[1], value=["a"]), t(id=[1], value=["b"])),
        ({"id": 1, "value": "a"},),
    ),
    "sequence-by-ignores-older-updates": Case(
        SEQ,
        (
            t(id=[1, 2], value=["v5", "v5"], ts=[5, 5]),
            t(id=[1, 2, 3], value=["v3", "v9", "v1"], ts=[3, 9, 1]),
        ),
        (
            {"id": 1, "value": "v5", "ts": 5},
            {"id": 2, "value": "v9", "ts": 9},
            {"id": 3, "value": "v1", "ts": 1},
        ),
    ),
    "sequence-by-across-versions": Case(
        SEQ,
        (
            t(id=[1], value=["v5"], ts=[5]),
            t(id=[1, 2], value=["v8", "w2"], ts=[8, 2]),
            t(id=[1, 2], value=["v7", "w1"], ts=[7, 1]),  # older than version 1's rows
        ),
        ({"id": 1, "value": "v8", "ts": 8}, {"id": 2, "value": "w2", "ts": 2}),
    ),
    "sequence-by-replaces-a-null-target-sequence": Case(
        SEQ,
        (t(id=[1], value=["old"], ts=[0]), t(id=[1], value=["new"], ts=[1])),
        ({"id": 1, "value": "new", "ts": 1},),
        clear_sequence=True,
    ),
    "delete-when-deletes-matched-rows-and-never-inserts": Case(
        DEL,
        (
            t(id=[1, 2], value=["a", "b"], op=["I", "I"]),
            t(id=[1, 3], value=[None, "c"], op=["D", "D"]),
        ),
        ({"id": 2, "value": "b", "op": "I"},),
    ),
    "delete-when-respects-sequence-by": Case(
        SEQ_DEL,
        (t(id=[1, 2], ts=[5, 5], op=["I", "I"]), t(id=[1, 2], ts=[4, 6], op=["D", "D"])),
        ({"id": 1, "ts": 5, "op": "I"},),
    ),
    "delete-then-reinsert-across-versions": Case(
        SEQ_DEL,
        (
            t(id=[1, 2, 3], ts=[5, 5, 5], op=["I", "I", "I"]),
            t(id=[1, 2, 4], ts=[6, 4, 1], op=["D", "D", "I"]),
            t(id=[1, 4, 5], ts=[7, 2, 1], op=["I", "D", "I"]),
        ),
        (
            {"id": 1, "ts": 7, "op": "I"},
            {"id": 2, "ts": 5, "op": "I"},
            {"id": 3, "ts": 5, "op": "I"},
            {"id": 5, "ts": 1, "op": "I"},
        ),
    ),
    # Issue 11, defect 1: a delete leaves no sequence behind, so a later version's
    # OLDER row inserts the key again; coalesced must end as one-by-one does.
    "late-older-rows-after-a-delete": Case(
        SEQ_DEL,
        (
            t(id=[1], ts=[1], op=["U"]),
            t(id=[1, 3], ts=[5, 5], op=["D", "D"]),
            t(id=[1, 3], ts=[3, 3], op=["U", "U"]),
        ),
        ({"id": 1, "ts": 3, "op": "U"}, {"id": 3, "ts": 3, "op": "U"}),
    ),
    "delete-reinsert-delete-with-ties": Case(
        SEQ_DEL,
        (
            t(id=[1, 2, 3], ts=[4, 4, 9], op=["U", "U", "U"]),
            t(id=[1, 2, 3], ts=[4, 6, 2], op=["D", "D", "D"]),
            t(id=[1, 2, 3], ts=[2, 1, 8], op=["U", "U", "U"]),
            t(id=[1, 2, 3], ts=[2, 1, 1], op=["D", "U", "D"]),
        ),
        ({"id": 2, "ts": 1, "op": "U"}, {"id": 3, "ts": 9, "op": "U"}),
    ),
    "composite-integer-and-date-key": Case(
        MergeSpec(keys=["id", "day"]),
        (
            t(id=[1, 2], day=[date(2024, 1, 1)] * 2, value=["a", "b"]),
            t(id=[1, 3], day=[date(2024, 1, 1), date(2024, 2, 1)], value=["A", "c"]),
        ),
        (
            {"id": 1, "day": date(2024, 1, 1), "value": "A"},
            {"id": 2, "day": date(2024, 1, 1), "value": "b"},
            {"id": 3, "day": date(2024, 2, 1), "value": "c"},
        ),
    ),
    "batch-may-omit-nullable-target-columns": Case(
        MergeSpec(keys=["id"], allow_missing_columns=True),
        (t(id=[1], a=["x"], b=[1]), t(id=[1, 2], b=[5, 6])),
        ({"id": 1, "a": "x", "b": 5}, {"id": 2, "a": None, "b": 6}),
        columns=(("id", "b"),),
    ),
}


def _sinks(root: Path, name: str, spec: MergeSpec, coalesced: bool) -> tuple[DeltaSink, DeltaSink]:
    return (
        DeltaSink(str(root / f"{name}-embedded"), "app", spec, coalesce=coalesced),
        DeltaSink(str(root / f"{name}-spark-sql"), "app", spec),
    )


def _start(sink: DeltaSink, case: Case) -> None:
    sink.write(case.batches[0], 0)
    if case.clear_sequence:
        DeltaTable(sink.target).update(updates={"ts": "NULL"})
    for version, batch in enumerate(case.batches[1:], start=1):
        sink.pre_commit(batch, version)


def run_spark_sql(spark: Any, sink: DeltaSink, case: Case, *, coalesced: bool) -> list[str]:
    """Apply the staged versions 1.. with the Spark backend's SQL on Sail."""
    target_ref, staging_ref = table_ref(sink.target), table_ref(sink.staging)
    versions = list(range(1, len(case.batches)))
    columns = [
        case.columns[v - 1] if case.columns else tuple(case.batches[v].column_names)
        for v in versions
    ]
    groups = [versions] if coalesced and len(set(columns)) == 1 else [[v] for v in versions]
    statements = []
    for group in groups:
        source = source_sql(staging_ref, group, columns[group[0] - 1], case.spec)
        target = spark.sql(f"SELECT * FROM {target_ref}").schema
        prune = key_prune(spark, staging_ref, group, case.spec.keys, target)
        assert prune is not None  # every case has an integer key
        statement = merge_sql(
            target_ref,
            case.spec,
            columns[group[0] - 1],
            source,
            prune=prune,
            has_guard=guarded(case.spec, group),
        )
        spark.sql(statement).collect()
        statements.append(statement)
    return statements


def read(spark: Any, target: str) -> Any:
    return spark.sql(f"SELECT * FROM {table_ref(target)} ORDER BY id")


RUNS = [(name, False) for name in CASES] + [
    (name, True) for name, case in CASES.items() if len(case.batches) > 2
]


@pytest.mark.parametrize(
    ("name", "coalesced"), RUNS, ids=[f"{n}-{'coalesced' if c else 'each'}" for n, c in RUNS]
)
def test_spark_sql_merge_equals_the_embedded_merge(
    spark: Any, tmp_path: Path, name: str, coalesced: bool
) -> None:
    case = CASES[name]
    embedded, spark_side = _sinks(tmp_path, name, case.spec, coalesced)
    _start(embedded, case)
    _start(spark_side, case)
    embedded.commit(len(case.batches) - 1)
    statements = run_spark_sql(spark, spark_side, case, coalesced=coalesced)

    assert len(statements) == (1 if coalesced else len(case.batches) - 1)
    assert support.rows(embedded.target) == list(case.expected)
    assert support.rows(spark_side.target) == list(case.expected)
    assert_df_equality(
        read(spark, embedded.target), read(spark, spark_side.target), ignore_nullable=True
    )


def test_merge_sql_text() -> None:
    staging_ref = table_ref("main.sales.orders__deltasink_staging_app")
    source = source_sql(staging_ref, [7], ["id", "ts", "op"], SEQ_DEL)
    assert source == (
        "SELECT `id`, `ts`, `op`, coalesce(`_deltasink_delete`, false) AS `_deltasink_delete` "
        "FROM `main`.`sales`.`orders__deltasink_staging_app` WHERE `_deltasink_version` IN (7)"
    )
    merge = merge_sql(table_ref("main.sales.orders"), SEQ_DEL, ["id", "ts", "op"], source)
    assert merge.splitlines() == [
        "MERGE INTO `main`.`sales`.`orders` AS t",
        f"USING ({source}) AS s",
        "ON t.`id` = s.`id`",
        "WHEN MATCHED AND ((s.`_deltasink_delete`) AND (t.`ts` IS NULL OR s.`ts` >= t.`ts`)) "
        "THEN DELETE",
        "WHEN MATCHED AND ((NOT s.`_deltasink_delete`) AND (t.`ts` IS NULL OR s.`ts` >= t.`ts`)) "
        "THEN UPDATE SET t.`ts` = s.`ts`, t.`op` = s.`op`",
        "WHEN NOT MATCHED AND (NOT s.`_deltasink_delete`) THEN INSERT (`id`, `ts`, `op`) "
        "VALUES (s.`id`, s.`ts`, s.`op`)",
    ]


def test_target_predicate_joins_the_on_clause_before_the_key_range() -> None:
    from deltasink.shapes.merge import compile_merge

    spec = MergeSpec(keys=["id"], target_predicate="t.day >= '2026-01-01'")
    plan = compile_merge(
        spec, ["id", "day"], has_delete=False, prune="t.`id` >= 1", sql=TargetSql("spark")
    )
    assert plan.on == "t.`id` = s.`id` AND (t.day >= '2026-01-01') AND t.`id` >= 1"
    target = pa.schema([("id", pa.int64()), ("day", pa.date32())])
    plan = compile_merge(
        spec,
        ["id", "day"],
        has_delete=False,
        prune="t.`id` >= 1",
        sql=TargetSql.over("delta-rs", target),
    )
    assert plan.on == (  # the string converted as Spark converts it, to a date
        "t.`id` = s.`id` AND ((t.`day` >= CAST('2026-01-01' AS DATE))) AND t.`id` >= 1"
    )


@pytest.mark.parametrize(
    ("spec", "order"),
    [
        (UPSERT, "`_deltasink_version` DESC"),
        (SEQ, "`ts` DESC, `_deltasink_version` DESC"),
        (INSERT, "`_deltasink_version` ASC"),
    ],
)
def test_coalesced_source_sql_text(spec: MergeSpec, order: str) -> None:
    assert source_sql(table_ref("/lake/s"), [1, 2], ["id", "ts"], spec) == (
        "SELECT `id`, `ts` FROM (SELECT *, row_number() OVER (PARTITION BY `id` ORDER BY "
        f"{order}) AS `_deltasink_rank` FROM delta.`/lake/s` WHERE `_deltasink_version` IN "
        "(1, 2)) WHERE `_deltasink_rank` = 1"
    )


def test_append_source_is_every_staged_row(spark: Any, tmp_path: Path) -> None:
    spec = MergeSpec(mode="append")
    sink = DeltaSink(str(tmp_path / "events"), "app", spec)
    for version, ids in enumerate([[1, 1], [2], [3, 1]]):
        sink.pre_commit(pa.table({"id": pa.array(ids, pa.int64())}), version)
    source = source_sql(table_ref(sink.staging), [0, 2], ["id"], spec)
    got = sorted(r.id for r in spark.sql(source).collect())
    assert got == [1, 1, 1, 3]
    assert source == (
        f"SELECT `id` FROM delta.`{sink.staging}` WHERE `_deltasink_version` IN (0, 2)"
    )


def test_key_prune_bounds_integer_and_date_keys(spark: Any, tmp_path: Path) -> None:
    spec = MergeSpec(keys=["id", "day", "name"])
    sink = DeltaSink(str(tmp_path / "t"), "app", spec)
    sink.write(t(id=[1], day=[date(2024, 1, 1)], name=["a"]), 0)
    sink.pre_commit(t(id=[5, -2], day=[date(2024, 3, 1), date(2023, 12, 31)], name=["b", "c"]), 1)
    sink.pre_commit(t(id=[40], day=[date(2024, 2, 1)], name=["d"]), 2)
    empty = pa.table(
        {
            "id": pa.array([], pa.int64()),
            "day": pa.array([], pa.date32()),
            "name": pa.array([], pa.string()),
        }
    )
    sink.pre_commit(empty, 3)
    staging = table_ref(sink.staging)
    target = spark.sql(f"SELECT * FROM {table_ref(sink.target)}").schema
    days = "t.`day` >= CAST('2023-12-31' AS DATE) AND t.`day` <= CAST('2024-03-01' AS DATE)"
    assert key_prune(spark, staging, [1], spec.keys, target) == (
        f"t.`id` >= -2 AND t.`id` <= 5 AND {days}"
    )
    assert key_prune(spark, staging, [1, 2], spec.keys, target) == (
        f"t.`id` >= -2 AND t.`id` <= 40 AND {days}"
    )
    assert key_prune(spark, staging, [3], spec.keys, target) is None  # no rows, no bounds
    assert key_prune(spark, staging, [1], ["name"], target) is None  # strings: not pruned
    source = source_sql(staging, [1], ["id", "day", "name"], spec)
    prune = key_prune(spark, staging, [1], spec.keys, target)
    merge = merge_sql(table_ref(sink.target), spec, ["id", "day", "name"], source, prune=prune)
    assert merge.splitlines()[2] == (
        f"ON t.`id` = s.`id` AND t.`day` = s.`day` AND t.`name` = s.`name` AND {prune}"
    )
    spark.sql(merge).collect()
    assert support.rows(sink.target) == [
        {"id": -2, "day": date(2023, 12, 31), "name": "c"},
        {"id": 1, "day": date(2024, 1, 1), "name": "a"},
        {"id": 5, "day": date(2024, 3, 1), "name": "b"},
    ]
