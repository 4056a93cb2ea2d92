"""Generated columns on the embedded engine, without a JVM (issue 43): the target made
by delta-rs with the column metadata delta-spark writes (``delta.generationExpression``),
the values asserted as Spark computes them (proven against delta-spark itself in
:mod:`tests.test_computed_columns`)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, Field, Schema, write_deltalake

from deltasink import DeltaSink, MergeSpec
from deltasink.errors import InvalidInputError, UnsupportedTableFeatureError
from tests import support

KX = pa.schema([("k", pa.int64()), ("x", pa.int64())])


def make(path: Path, *generated: tuple[str, str, str], seed: bool = True) -> str:
    """A target ``(k, x, <generated>...)``, holding the row ``(1, 10)`` if ``seed``."""
    fields = [Field("k", "long"), Field("x", "long")]
    fields += [Field(n, t, metadata={"delta.generationExpression": e}) for n, t, e in generated]
    DeltaTable.create(str(path), Schema(fields))
    if not seed:
        return str(path)
    first = DeltaSink(str(path), "seed", MergeSpec(mode="append"), engine="embedded")
    first.write(pa.Table.from_pylist([{"k": 1, "x": 10}], KX), 0)
    return str(path)


def rows(target: str) -> list[dict[str, object]]:
    return sorted(DeltaTable(target).to_pyarrow_table().to_pylist(), key=lambda r: str(r["k"]))


def nothing_staged(staging: str) -> bool:
    if not os.path.exists(os.path.join(staging, "_delta_log")):
        return True
    return DeltaTable(staging).to_pyarrow_table().num_rows == 0


@pytest.mark.parametrize("mode", ["upsert", "insert", "append"])
def test_a_generated_column_is_computed_with_every_row_written(tmp_path: Path, mode: str) -> None:
    """``g = x * 2`` omitted by the batch: computed for the inserted row (the insert-only
    fast path, the append) and recomputed from the new ``x`` of an updated one."""
    target = make(tmp_path / "t", ("g", "long", "x * 2"))
    spec = MergeSpec(mode="append") if mode == "append" else MergeSpec(keys=["k"], mode=mode)
    sink = DeltaSink(target, "app", spec, engine="embedded")
    key = 1 if mode == "upsert" else 2
    sink.write(pa.Table.from_pylist([{"k": key, "x": 30}], KX), 0)
    expected = {
        "upsert": [{"k": 1, "x": 30, "g": 60}],
        "insert": [{"k": 1, "x": 10, "g": 20}, {"k": 2, "x": 30, "g": 60}],
        "append": [{"k": 1, "x": 10, "g": 20}, {"k": 2, "x": 30, "g": 60}],
    }[mode]
    assert rows(target) == expected
    assert support.marker(target, "app") == 0


@pytest.mark.parametrize(
    ("column", "batch", "error", "match"),
    [
        (
            ("h", "double", "x / 4"),
            {"k": 2, "x": 30},
            UnsupportedTableFeatureError,
            "engine='spark'",
        ),
        (
            ("g", "long", "x * 2"),
            {"k": 2, "x": 30, "g": 61},
            InvalidInputError,
            "generated column g",
        ),
        (("g", "long", "x * 2"), {"k": 2, "x": 2**62}, InvalidInputError, "overflows"),
        (
            ("d", "date", "CAST(x AS DATE)"),
            {"k": 2, "x": 1},
            UnsupportedTableFeatureError,
            "x AS DATE",
        ),
    ],
    ids=["fractional-division", "carried-wrong", "overflow", "unresolvable"],
)
def test_a_generated_column_spark_would_not_write_is_refused_before_staging(
    tmp_path: Path, column: tuple[str, str, str], batch: dict[str, int], error: type, match: str
) -> None:
    """``x / 4`` (delta-rs: 7.0, Spark: 7.5), a carried ``g`` other than ``x * 2``, an
    ``x * 2`` that overflows (Spark fails it), an expression Spark does not resolve:
    refused by name, nothing staged, the target unchanged."""
    target = make(tmp_path / "t", column, seed=False)
    before = support.table_version(target)
    staging = str(tmp_path / "s")
    sink = DeltaSink(target, "app", MergeSpec(keys=["k"]), engine="embedded", staging=staging)
    schema = KX.append(pa.field("g", pa.int64())) if "g" in batch else KX
    with pytest.raises(error, match=match):
        sink.write(pa.Table.from_pylist([batch], schema), 0)
    assert nothing_staged(staging)
    assert support.table_version(target) == before


def test_a_generated_column_beside_deletes_is_computed_for_the_rows_written(
    tmp_path: Path,
) -> None:
    """With ``delete_when``, a deleted row carries no value to check; the written rows
    get Spark's value."""
    target = make(tmp_path / "t", ("g", "long", "x * 2"))
    spec = MergeSpec(keys=["k"], delete_when="x < 0")
    sink = DeltaSink(target, "app", spec, engine="embedded")
    sink.write(pa.Table.from_pylist([{"k": 1, "x": -1}, {"k": 2, "x": 30}], KX), 0)
    assert rows(target) == [{"k": 2, "x": 30, "g": 60}]


def with_sparks_rows(target: str, values: list[dict[str, object]], schema: pa.Schema) -> None:
    """Commit ``values`` into ``target`` as delta-spark would: their generated values as
    given (Spark's), in a file delta-rs did not check (written to a plain table first,
    its add action then committed to ``target``)."""
    plain = target + "_plain"
    write_deltalake(plain, pa.Table.from_pylist(values, schema))
    log = Path(plain, "_delta_log", f"{0:020d}.json").read_text().splitlines()
    add = next(line for line in log if '"add"' in line)
    name = json.loads(add)["add"]["path"]
    shutil.copy(Path(plain, name), Path(target, name))
    version = int(DeltaTable(target).version()) + 1
    Path(target, "_delta_log", f"{version:020d}.json").write_text(add + "\n")


@pytest.mark.parametrize("odd", [True, False], ids=["sparks-values-differ", "values-agree"])
def test_a_rewriting_mode_is_refused_where_delta_rs_would_refuse_sparks_rows(
    tmp_path: Path, odd: bool
) -> None:
    """delta-rs checks every row a MERGE writes again (the untouched rows of a file it
    rewrites, the change feed's pre-images) against its own ``x / 4``: a row delta-spark
    wrote with ``x = 10`` (Spark's 2.5, delta-rs's 2.0) failed that commit on every try
    (found by the table zoo, seed 1537582489). An upsert is refused by name before
    staging (and on the commit's snapshot); insert and append write no existing row and
    go on. Where every stored value agrees (``x = 8``), the upsert writes. The batch
    updates ``k = 3``; ``k = 1`` shares its file and is written again."""
    target = make(tmp_path / "t", ("h", "double", "x / 4"), seed=False)
    schema = KX.append(pa.field("h", pa.float64()))
    x = 10 if odd else 8
    with_sparks_rows(target, [{"k": 1, "x": x, "h": x / 4}, {"k": 3, "x": 8, "h": 2.0}], schema)
    staging = str(tmp_path / "s")
    upsert = DeltaSink(target, "up", MergeSpec(keys=["k"]), engine="embedded", staging=staging)
    batch = pa.Table.from_pylist([{"k": 3, "x": 12}, {"k": 2, "x": 4}], KX)  # k = 1 copied
    if odd:
        with pytest.raises(UnsupportedTableFeatureError, match=r"1 row.* of the target") as caught:
            upsert.write(batch, 0)
        assert caught.value.features == ["generatedColumns: h"]
        assert nothing_staged(staging)
        insert = DeltaSink(target, "in", MergeSpec(keys=["k"], mode="insert"), engine="embedded")
        insert.write(batch, 0)
        assert rows(target) == [
            {"k": 1, "x": 10, "h": 2.5},
            {"k": 2, "x": 4, "h": 1.0},
            {"k": 3, "x": 8, "h": 2.0},
        ]
    else:
        upsert.write(batch, 0)
        assert rows(target) == [
            {"k": 1, "x": 8, "h": 2.0},
            {"k": 2, "x": 4, "h": 1.0},
            {"k": 3, "x": 12, "h": 3.0},
        ]
