"""The bad-input matrix: types, nulls, duplicates, versions, unicode and reserved
column names, decimals and timestamps, nested types, schema evolution on and off.

Every case asserts either its named error (type, message, ``column``; nothing staged,
the target unchanged) or its exact result (target rows and marker). The findings
this matrix turned up (raw engine errors, poison versions) were fixed and stay as
regression tests.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from deltasink import (
    DeltaSink,
    DeltaSinkError,
    DuplicateKeyError,
    InvalidInputError,
    InvalidVersionError,
    KeyColumnError,
    MergeSpec,
    SchemaMismatchError,
)
from deltasink.core.protocol import MAX_VERSION
from tests import support

UPSERT = MergeSpec(keys=["id"])
APPEND = MergeSpec(mode="append")
EVOLVE = MergeSpec(keys=["id"], schema_evolution=True)
UTC = dt.timezone.utc


def table(**columns: Any) -> pa.Table:
    """A batch; a column given as ``(values, type)`` gets that Arrow type."""
    arrays = {}
    for name, value in columns.items():
        if isinstance(value, tuple):
            arrays[name] = pa.array(*value)
        else:
            arrays[name] = value if isinstance(value, pa.Array) else pa.array(value)
    return pa.table(arrays)


@dataclass(frozen=True)
class Case:
    """One row of the matrix.

    Attributes:
        id: The test id.
        batch: The batch under test, staged as the version after ``setup``.
        spec: The sink's MergeSpec.
        setup: Batches committed first (versions 0, 1, ...): they create the target.
        error: The named error expected from ``pre_commit``, or ``None``.
        match: A regular expression the error message must match.
        column: The error's ``column`` attribute.
        rows: The exact target rows after committing the batch (sorted by ``sort_by``).
        sort_by: The column rows are sorted by.
    """

    id: str
    batch: pa.Table
    spec: MergeSpec = UPSERT
    setup: tuple[pa.Table, ...] = ()
    error: type[DeltaSinkError] | None = None
    match: str = ""
    column: str | None = None
    rows: list[dict[str, Any]] | None = None
    sort_by: str = "id"


def rejected(
    id: str,
    batch: pa.Table,
    error: type[DeltaSinkError],
    match: str,
    column: str | None,
    *,
    setup: tuple[pa.Table, ...] = (),
    spec: MergeSpec = UPSERT,
) -> Case:
    return Case(id, batch, spec, setup, error, match, column)


def accepted(
    id: str,
    batch: pa.Table,
    rows: list[dict[str, Any]],
    *,
    setup: tuple[pa.Table, ...] = (),
    spec: MergeSpec = UPSERT,
    sort_by: str = "id",
) -> Case:
    return Case(id, batch, spec, setup, rows=rows, sort_by=sort_by)


def lossy(name: str, found: str, stored: str) -> str:
    return rf"column '{name}' has type {found} but target .* stores {stored}, and the cast could lose data"


INT32_TARGET = (table(id=[1], n=([1], pa.int32())),)
LONG_TARGET = (table(id=[1], n=([1], pa.int64())),)
DOUBLE_TARGET = (table(id=[1], x=([0.5], pa.float64())),)
FLOAT_TARGET = (table(id=[1], x=([0.5], pa.float32())),)
STRING_TARGET = (table(id=[1], s=["a"]),)
DEC_10_2 = (table(id=[1], d=([Decimal("1.10")], pa.decimal128(10, 2))),)
DEC_12_2 = (table(id=[1], d=([Decimal("1.10")], pa.decimal128(12, 2))),)
TS_US = (table(id=[1], ts=([0], pa.timestamp("us"))),)
TS_UTC = (table(id=[1], ts=([0], pa.timestamp("us", tz="UTC"))),)
STRUCT_TARGET = (
    table(id=[1], s=([{"a": 1, "b": "x"}], pa.struct([("a", pa.int64()), ("b", pa.string())]))),
)
EPOCH = dt.datetime(1970, 1, 1)

CASES = [
    # -- types ---------------------------------------------------------------------------
    rejected(
        "int64-into-int32",
        table(id=[2], n=[5]),
        SchemaMismatchError,
        lossy("n", "int64", "int32"),
        "n",
        setup=INT32_TARGET,
    ),
    accepted(
        "int8-and-uint32-widen-to-int64",
        table(id=([2, 3], pa.int8()), n=([2**31 - 1, 4294967295], pa.uint32())),
        [{"id": 1, "n": 1}, {"id": 2, "n": 2**31 - 1}, {"id": 3, "n": 4294967295}],
        setup=LONG_TARGET,
    ),
    rejected(
        "uint64-into-int64",
        table(id=[2], n=([5], pa.uint64())),
        SchemaMismatchError,
        lossy("n", "uint64", "int64"),
        "n",
        setup=LONG_TARGET,
    ),
    rejected(
        "bool-into-int64",
        table(id=[2], n=[True]),
        SchemaMismatchError,
        lossy("n", "bool", "int64"),
        "n",
        setup=LONG_TARGET,
    ),
    rejected(
        "int64-into-double",
        table(id=[2], x=[2**53 + 1]),
        SchemaMismatchError,
        lossy("x", "int64", "double"),
        "x",
        setup=DOUBLE_TARGET,
    ),
    accepted(
        "int32-into-double",
        table(id=[2], x=([2**31 - 1], pa.int32())),
        [{"id": 1, "x": 0.5}, {"id": 2, "x": 2147483647.0}],
        setup=DOUBLE_TARGET,
    ),
    rejected(
        "double-into-float",
        table(id=[2], x=[0.1]),
        SchemaMismatchError,
        lossy("x", "double", "float"),
        "x",
        setup=FLOAT_TARGET,
    ),
    rejected(
        "string-into-int64",
        table(id=[2], n=["7"]),
        SchemaMismatchError,
        lossy("n", "string", "int64"),
        "n",
        setup=LONG_TARGET,
    ),
    accepted(
        "large-string-into-string",
        table(id=[2, 3], s=(["é", "x"], pa.large_string())),
        [{"id": 1, "s": "a"}, {"id": 2, "s": "é"}, {"id": 3, "s": "x"}],
        setup=STRING_TARGET,
    ),
    # -- nulls ---------------------------------------------------------------------------
    accepted(
        "null-in-a-value-column",
        table(id=[2, 3], s=["b", None]),
        [{"id": 1, "s": "a"}, {"id": 2, "s": "b"}, {"id": 3, "s": None}],
        setup=STRING_TARGET,
    ),
    accepted(
        "null-typed-column-into-string",
        table(id=[2], s=pa.nulls(1)),
        [{"id": 1, "s": "a"}, {"id": 2, "s": None}],
        setup=STRING_TARGET,
    ),
    rejected(
        "null-in-a-composite-key",
        table(region=["eu", None], id=[1, 2]),
        KeyColumnError,
        r"key column 'region' is null in 1 row",
        "region",
        spec=MergeSpec(keys=["id", "region"]),
    ),
    rejected(
        "null-key-in-insert-mode",
        table(id=([None], pa.int64()), s=["x"]),
        KeyColumnError,
        r"key column 'id' is null",
        "id",
        spec=MergeSpec(keys=["id"], mode="insert"),
    ),
    # -- duplicates ----------------------------------------------------------------------
    rejected(
        "identical-rows-in-upsert",
        table(id=[1, 1], s=["a", "a"]),
        DuplicateKeyError,
        r"\{'id': 1\} \(2 times\)",
        "id",
    ),
    rejected(
        "duplicate-keys-in-insert-mode",
        table(id=[1, 2, 2, 2], s=list("abcd")),
        DuplicateKeyError,
        r"\{'id': 2\} \(3 times\)",
        "id",
        spec=MergeSpec(keys=["id"], mode="insert"),
    ),
    accepted(
        "duplicate-rows-in-append-mode",
        table(id=[1, 1], s=["a", "a"]),
        [{"id": 1, "s": "a"}] * 3,
        setup=(table(id=[1], s=["a"]),),
        spec=APPEND,
    ),
    accepted(
        "sequence-by-tie-goes-to-the-later-row",
        table(id=[2, 2, 2], ts=[5, 5, 4], s=["first", "second", "older"]),
        [{"id": 1, "ts": 1, "s": "a"}, {"id": 2, "ts": 5, "s": "second"}],
        setup=(table(id=[1], ts=[1], s=["a"]),),
        spec=MergeSpec(keys=["id"], sequence_by="ts"),
    ),
    accepted(
        "insert-mode-keeps-existing-rows",
        table(id=[1, 2], s=["changed", "b"]),
        [{"id": 1, "s": "a"}, {"id": 2, "s": "b"}],
        setup=STRING_TARGET,
        spec=MergeSpec(keys=["id"], mode="insert"),
    ),
    # -- unicode and reserved column names -------------------------------------------------
    accepted(
        "unicode-space-dot-backtick-key-names",
        table(
            **{
                "order id": [1, 2],
                "a.b": [2, 2],
                "名前": ["x", "y"],
                "x`y": [1, 1],
                "📦": [9.5, 2.5],
            }
        ),
        [
            {"order id": 1, "a.b": 2, "名前": "x", "x`y": 1, "📦": 9.5},
            {"order id": 2, "a.b": 2, "名前": "y", "x`y": 1, "📦": 2.5},
        ],
        setup=(table(**{"order id": [1], "a.b": [2], "名前": ["x"], "x`y": [1], "📦": [1.5]}),),
        spec=MergeSpec(keys=["order id", "a.b", "名前", "x`y"]),
        sort_by="order id",
    ),
    accepted(
        "unicode-values",
        table(id=[2, 3], s=["a\x00b", "😀 עברית \u202e"]),
        [{"id": 1, "s": "a"}, {"id": 2, "s": "a\x00b"}, {"id": 3, "s": "😀 עברית \u202e"}],
        setup=STRING_TARGET,
    ),
    rejected(
        "reserved-delete-column",
        table(id=[1], _deltasink_delete=[True]),
        SchemaMismatchError,
        "reserves for its own columns",
        "_deltasink_delete",
    ),
    rejected(
        "case-differs-from-target",
        table(id=[2], S=["b"]),
        SchemaMismatchError,
        r"'S' is not in target .* the target has 's'",
        "S",
        setup=STRING_TARGET,
        spec=EVOLVE,
    ),
    # -- decimals and timestamps -------------------------------------------------------------
    accepted(
        "decimal-widening",
        table(id=[2], d=([Decimal("12345678.91")], pa.decimal128(10, 2))),
        [{"id": 1, "d": Decimal("1.10")}, {"id": 2, "d": Decimal("12345678.91")}],
        setup=DEC_12_2,
    ),
    rejected(
        "decimal-more-scale",
        table(id=[2], d=([Decimal("1.123")], pa.decimal128(10, 3))),
        SchemaMismatchError,
        lossy("d", r"decimal128\(10, 3\)", r"decimal128\(10, 2\)"),
        "d",
        setup=DEC_10_2,
    ),
    rejected(
        "decimal-more-integer-digits",
        table(id=[2], d=([Decimal("1.10")], pa.decimal128(13, 2))),
        SchemaMismatchError,
        lossy("d", r"decimal128\(13, 2\)", r"decimal128\(12, 2\)"),
        "d",
        setup=DEC_12_2,
    ),
    accepted(
        "int32-into-decimal-12-2",
        table(id=[2], d=([2**31 - 1], pa.int32())),
        [{"id": 1, "d": Decimal("1.10")}, {"id": 2, "d": Decimal("2147483647.00")}],
        setup=DEC_12_2,
    ),
    rejected(
        "int64-into-decimal-10-2",
        table(id=[2], d=[5]),
        SchemaMismatchError,
        lossy("d", "int64", r"decimal128\(10, 2\)"),
        "d",
        setup=DEC_10_2,
    ),
    rejected(
        "nanoseconds-into-microseconds",
        table(id=[2], ts=([1001], pa.timestamp("ns"))),
        SchemaMismatchError,
        r"'ts' cannot be cast from timestamp\[ns\] to timestamp\[us\].*would lose data",
        "ts",
        setup=TS_US,
    ),
    accepted(
        "whole-microsecond-nanoseconds",
        table(id=[2], ts=([1000], pa.timestamp("ns"))),
        [{"id": 1, "ts": EPOCH}, {"id": 2, "ts": EPOCH + dt.timedelta(microseconds=1)}],
        setup=TS_US,
    ),
    accepted(
        "paris-time-into-utc",
        table(id=[2], ts=([3_600_000_000], pa.timestamp("us", tz="Europe/Paris"))),
        [
            {"id": 1, "ts": EPOCH.replace(tzinfo=UTC)},
            {"id": 2, "ts": dt.datetime(1970, 1, 1, 1, tzinfo=UTC)},
        ],
        setup=TS_UTC,
    ),
    rejected(
        "local-time-into-utc",
        table(id=[2], ts=([1], pa.timestamp("us"))),
        SchemaMismatchError,
        lossy("ts", r"timestamp\[us\]", r"timestamp\[us, tz=UTC\]"),
        "ts",
        setup=TS_UTC,
    ),
    rejected(
        "date-into-timestamp",
        table(id=[2], ts=([1], pa.date32())),
        SchemaMismatchError,
        lossy("ts", r"date32\[day\]", r"timestamp\[us\]"),
        "ts",
        setup=TS_US,
    ),
    # -- nested types ---------------------------------------------------------------------------
    accepted(
        "struct-missing-a-nullable-field",
        table(id=[2], s=([{"a": 2}], pa.struct([("a", pa.int64())]))),
        [{"id": 1, "s": {"a": 1, "b": "x"}}, {"id": 2, "s": {"a": 2, "b": None}}],
        setup=STRUCT_TARGET,
    ),
    rejected(
        "struct-with-a-new-field-even-with-evolution",
        table(
            id=[2],
            s=(
                [{"a": 2, "b": "y", "c": 1.5}],
                pa.struct([("a", pa.int64()), ("b", pa.string()), ("c", pa.float64())]),
            ),
        ),
        SchemaMismatchError,
        r"column 's' has type struct<a: int64, b: string, c: double> but target",
        "s",
        setup=STRUCT_TARGET,
        spec=EVOLVE,
    ),
    accepted(
        "list-and-map-widening",
        table(
            id=[1],
            l=([[2, 3]], pa.list_(pa.int32())),
            m=([[("k", 2), ("j", 3)]], pa.map_(pa.string(), pa.int32())),
        ),
        [{"id": 1, "l": [2, 3], "m": [("k", 2), ("j", 3)]}],
        setup=(
            table(
                id=[1],
                l=([[1]], pa.list_(pa.int64())),
                m=([[("k", 1)]], pa.map_(pa.string(), pa.int64())),
            ),
        ),
    ),
    rejected(
        "list-narrowing",
        table(id=[2], l=([[1]], pa.list_(pa.int64()))),
        SchemaMismatchError,
        lossy("l", r"list<item: int64>", r"list<element: int32>"),
        "l",
        setup=(table(id=[1], l=([[1]], pa.list_(pa.int32()))),),
    ),
    # -- schema evolution on and off -------------------------------------------------------------
    rejected(
        "new-nested-column-without-evolution",
        table(id=[2], s=["b"], tags=[["x"]]),
        SchemaMismatchError,
        r"column 'tags' \(list<item: string>\) is not in target.*schema_evolution=True",
        "tags",
        setup=STRING_TARGET,
    ),
    accepted(
        "new-decimal-column-with-evolution",
        table(id=[2], s=["b"], price=([Decimal("1.25")], pa.decimal128(5, 2))),
        [{"id": 1, "s": "a", "price": None}, {"id": 2, "s": "b", "price": Decimal("1.25")}],
        setup=STRING_TARGET,
        spec=EVOLVE,
    ),
    accepted(
        "new-list-column-with-evolution-in-append-mode",
        table(id=[2], tags=[["x", "y"]]),
        [{"id": 1, "tags": None}, {"id": 2, "tags": ["x", "y"]}],
        setup=(table(id=[1]),),
        spec=MergeSpec(mode="append", schema_evolution=True),
    ),
    rejected(
        "evolution-does-not-change-a-type",
        table(id=[2], s=[7]),
        SchemaMismatchError,
        lossy("s", "int64", "string"),
        "s",
        setup=STRING_TARGET,
        spec=EVOLVE,
    ),
    rejected(
        "missing-column-refused-by-name",
        table(id=[1, 3], a=["A1", "A3"]),
        SchemaMismatchError,
        r"the batch lacks column\(s\) \['b'\] of target .*"
        r"set MergeSpec\(allow_missing_columns=True\)",
        "b",
        setup=(table(id=[1, 2], a=["a1", "a2"], b=["b1", "b2"]),),
    ),
    accepted(
        "missing-column-allowed-keeps-the-target-value",
        table(id=[1, 3], a=["A1", "A3"]),
        [
            {"id": 1, "a": "A1", "b": "b1"},
            {"id": 2, "a": "a2", "b": "b2"},
            {"id": 3, "a": "A3", "b": None},
        ],
        setup=(table(id=[1, 2], a=["a1", "a2"], b=["b1", "b2"]),),
        spec=MergeSpec(keys=["id"], allow_missing_columns=True),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_matrix(target: str, case: Case) -> None:
    sink = DeltaSink(target, "matrix", case.spec)
    for version, setup in enumerate(case.setup):
        sink.write(setup, version)
    version = len(case.setup)
    before = support.table_version(target)
    if case.error is not None:
        with pytest.raises(case.error, match=case.match) as info:
            sink.pre_commit(case.batch, version)
        assert type(info.value) is case.error
        assert info.value.column == case.column
        assert support.staged_versions(sink.staging) == []
        assert not any(f"={version}/" in f for f in support.staged_files_on_disk(sink.staging))
        assert support.table_version(target) == before
        assert sink.status().pending_versions == []
    else:
        assert sink.write(case.batch, version).committed_versions == [version]
        assert support.rows(target, sort_by=case.sort_by) == case.rows
        assert support.marker(target, "matrix") == version
        assert support.staged_versions(sink.staging) == []


def test_the_matrix_has_at_least_twenty_cases() -> None:
    assert len(CASES) >= 20
    assert len({c.id for c in CASES}) == len(CASES)


# -- versions -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "match"),
    [
        (np.uint64(2**63), "between 0 and 9223372036854775806, got 9223372036854775808"),
        (np.int64(2**63 - 1), "between 0 and 9223372036854775806, got 9223372036854775807"),
        (Decimal(3), "must be an int .* of type Decimal"),
        (Fraction(6, 2), "must be an int .* of type Fraction"),
        (np.float64(3.0), "must be an int .* of type float64"),
    ],
    ids=["uint64-beyond-long", "long-max-has-no-successor", "decimal", "fraction", "numpy-float"],
)
def test_versions_that_are_not_delta_longs(target: str, version: object, match: str) -> None:
    sink = DeltaSink(target, "matrix", APPEND)
    with pytest.raises(InvalidVersionError, match=match):
        sink.pre_commit(table(id=[1]), version)
    assert not support.exists(sink.staging)
    assert not support.exists(target)


def test_the_largest_valid_version_is_one_below_the_largest_delta_long(target: str) -> None:
    assert MAX_VERSION == 2**63 - 2  # documented in docs/usage.md ("Parameters", versions)
    sink = DeltaSink(target, "matrix", APPEND)
    sink.write(table(id=[0]), 7)
    with pytest.raises(InvalidVersionError, match="between 0 and 9223372036854775806"):
        sink.write(table(id=[9]), 2**63 - 1)  # Long.MAX_VALUE: refused, nothing written
    with pytest.raises(InvalidVersionError, match="between 0 and 9223372036854775806"):
        sink.commit(2**63 - 1)
    assert support.marker(target, "matrix") == 7
    assert support.table_version(target) == 0
    assert sink.status().pending_versions == []
    assert sink.write(table(id=[1]), np.int64(MAX_VERSION)).committed_versions == [MAX_VERSION]
    assert support.marker(target, "matrix") == MAX_VERSION
    assert sink.pre_commit(table(id=[2]), MAX_VERSION).state == "already_committed"
    assert support.ids(target) == [0, 1]


def test_date_versions_with_gaps_and_late_replays(target: str) -> None:
    sink = DeltaSink(target, "matrix", APPEND)
    sink.write(table(id=[31]), 20240131)
    sink.write(table(id=[1]), 20240201)  # gaps between versions are fine
    assert sink.pre_commit(table(id=[30]), 20240130).state == "already_committed"
    assert sink.commit(20240130).results == ()
    assert support.ids(target) == [1, 31]
    assert support.txn_commits(target, "matrix") == {20240131: [0], 20240201: [1]}


def test_commit_below_every_pending_version_is_a_no_op(target: str) -> None:
    sink = DeltaSink(target, "matrix", APPEND)
    sink.pre_commit(table(id=[5]), 5)
    assert sink.commit(4).results == ()
    assert not support.exists(target)
    assert sink.status().pending_versions == [5]


def test_spark_types_round_trip(target: str, spark: Any) -> None:
    df = spark.sql(
        "SELECT 1L AS id, CAST('2024-01-01 10:00:00' AS TIMESTAMP) AS ts, "
        "CAST(1.5 AS DECIMAL(10, 2)) AS d, CAST(NULL AS STRING) AS s, ARRAY(1, 2) AS l, "
        "NAMED_STRUCT('a', 1, 'b', 'x') AS st, MAP('k', 1.5D) AS m"
    )
    DeltaSink(target, "matrix", UPSERT).write(df, 0)
    assert support.rows(target) == [
        {
            "id": 1,
            "ts": dt.datetime(2024, 1, 1, 10, tzinfo=UTC),
            "d": Decimal("1.50"),
            "s": None,
            "l": [1, 2],
            "st": {"a": 1, "b": "x"},
            "m": [("k", 1.5)],
        }
    ]


# -- regressions: findings fixed in deltasink -------------------------------------------------------------------------------------


def assert_nothing_written(sink: DeltaSink) -> None:
    assert support.staged_versions(sink.staging) == []
    assert sink.status().pending_versions == []
    assert not support.exists(sink.target)


@pytest.mark.parametrize(
    ("batch", "column"),
    [(table(id=[1], ID=[2]), "ID"), (table(id=[1], _DeltaSink_Version=[2]), "_DeltaSink_Version")],
    ids=["id-and-ID", "reserved-prefix-other-case"],
)
def test_names_equal_ignoring_case_are_rejected(target: str, batch: pa.Table, column: str) -> None:
    sink = DeltaSink(target, "matrix", APPEND)
    with pytest.raises(SchemaMismatchError) as info:
        sink.pre_commit(batch, 0)
    assert info.value.column == column
    assert_nothing_written(sink)


@pytest.mark.parametrize(
    "column",
    [
        pa.array([dt.time(1, 2, 3)], pa.time64("us")),
        pa.array([1.5], pa.float16()),
        pa.array([5], pa.duration("s")),
        pa.array([Decimal("1.5")], pa.decimal256(40, 2)),
        pa.array([1_001], pa.timestamp("ns", tz="Europe/Paris")),
    ],
    ids=["time64", "float16", "duration", "decimal256", "ns-with-zone"],
)
def test_types_delta_has_no_type_for_are_named(target: str, column: pa.Array) -> None:
    sink = DeltaSink(target, "matrix", UPSERT)
    error = raised(lambda: sink.write(pa.table({"id": [1], "x": column}), 0))
    if error is not None:  # rejected with the column named, nothing written ...
        assert isinstance(error, SchemaMismatchError)
        assert error.column == "x"
        assert_nothing_written(sink)
    else:  # ... or stored without changing the value
        assert support.rows(target) == [{"id": 1, "x": column.to_pylist()[0]}]


def test_sub_microsecond_timestamps_are_not_truncated_silently(target: str) -> None:
    sink = DeltaSink(target, "matrix", UPSERT)
    batch = pa.table({"id": [1], "ts": pa.array([1_000_000_001], pa.timestamp("ns"))})
    with pytest.raises(SchemaMismatchError) as info:
        sink.pre_commit(batch, 0)
    assert info.value.column == "ts"
    assert_nothing_written(sink)


@pytest.mark.parametrize(
    ("batch", "spec"),
    [
        (pa.table({"id": pa.array([2**64 - 1], pa.uint64())}), APPEND),
        (pa.table({"id": pa.array([2**63 + 5], pa.uint64()), "s": ["x"]}), UPSERT),
        (pa.table({}), APPEND),
    ],
    ids=["uint64-max-append", "uint64-key", "no-columns"],
)
def test_batches_delta_cannot_hold_are_rejected_before_staging(
    target: str, batch: pa.Table, spec: MergeSpec
) -> None:
    sink = DeltaSink(target, "matrix", spec)
    with pytest.raises(InvalidInputError):
        sink.pre_commit(batch, 0)
    assert_nothing_written(sink)


def test_a_null_typed_column_does_not_poison_a_new_target(target: str, spark: Any) -> None:
    sink = DeltaSink(target, "matrix", UPSERT)
    first = spark.sql("SELECT 1L AS id, NULL AS note")
    error = raised(lambda: sink.write(first, 0))
    if error is not None:  # rejected with the column named, nothing written ...
        assert isinstance(error, SchemaMismatchError)
        assert error.column == "note"
        assert_nothing_written(sink)
    else:  # ... or a typed value can follow
        sink.write(spark.sql("SELECT 2L AS id, 'x' AS note"), 1)
        assert support.rows(target) == [{"id": 1, "note": None}, {"id": 2, "note": "x"}]


def test_dictionary_encoded_strings_fit_a_string_column(target: str) -> None:
    sink = DeltaSink(target, "matrix", UPSERT)
    sink.write(table(id=[1], s=["a"]), 0)
    sink.write(pa.table({"id": [2], "s": pa.array(["b"]).dictionary_encode()}), 1)
    assert support.rows(target) == [{"id": 1, "s": "a"}, {"id": 2, "s": "b"}]


def test_a_struct_key_gets_a_named_error_or_works(target: str) -> None:
    sink = DeltaSink(target, "matrix", UPSERT)
    batch = pa.table({"id": [{"a": 1}], "v": [1]})
    error = raised(lambda: sink.pre_commit(batch, 0))
    if error is not None:
        assert isinstance(error, InvalidInputError)
        assert error.column == "id"
        assert_nothing_written(sink)
    else:
        sink.commit(0)
        assert support.rows(target, sort_by="v") == [{"id": {"a": 1}, "v": 1}]


def raised(call: Callable[[], object]) -> DeltaSinkError | None:
    """The named error ``call`` raised, or ``None`` if it returned (other errors
    propagate)."""
    try:
        call()
    except DeltaSinkError as exc:
        return exc
    return None
