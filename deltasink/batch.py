"""Batches: user input (a PySpark DataFrame or Arrow data) to a validated Arrow table.

Validation is vectorised in Arrow and happens before anything is written:
reserved and duplicate column names, key and ``sequence_by`` columns present and
non-null, types compatible with the target, and one row per key (or the latest row
per key with ``sequence_by``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltasink.errors import (
    DuplicateKeyError,
    InvalidInputError,
    KeyColumnError,
    SchemaMismatchError,
)
from deltasink.schema import align_to_target, to_delta_types
from deltasink.spec import RESERVED_PREFIX, MergeSpec

__all__ = [
    "DELETE_COLUMN",
    "GUARD_COLUMN",
    "check_required",
    "coalesce",
    "collect",
    "delete_expr",
    "is_spark_dataframe",
    "prepare",
    "quote",
    "spark_arrow",
]

#: Staged boolean column: the row deletes its key (``MergeSpec.delete_when``).
DELETE_COLUMN = "_deltasink_delete"
#: Coalesced batches only: the sequence value a target row is compared with (see
#: :func:`coalesce`); never written to a table.
GUARD_COLUMN = "_deltasink_sequence_guard"
_ROW = "_deltasink_row"
_VERSION = "_deltasink_coalesced_version"


def quote(name: str) -> str:
    """Quote a column name for Spark SQL and delta-rs predicates (backticks)."""
    return "`" + name.replace("`", "``") + "`"


#: PySpark releases whose DataFrames deltasink reads (Databricks 14.3 LTS and later).
SUPPORTED_PYSPARK = "3.5 and 4.x"


def is_spark_dataframe(obj: object) -> bool:
    """Whether ``obj`` is a PySpark DataFrame, classic or Spark Connect (any release;
    :func:`spark_arrow` refuses the unsupported ones)."""
    return (
        type(obj).__module__.startswith("pyspark.sql")
        and type(obj).__name__ == "DataFrame"
        and hasattr(obj, "schema")
    )


def spark_arrow(df: Any) -> pa.Table:
    """A PySpark DataFrame's rows as one Arrow table, without Python row objects.

    PySpark 4 has ``DataFrame.toArrow``. PySpark 3.5 (Databricks 14.3-15.4 LTS) does
    not: a classic DataFrame is collected with the Arrow batches ``toPandas`` itself
    uses, a Spark Connect one through ``toPandas`` with the Arrow schema of its Spark
    schema.

    Raises:
        InvalidInputError: A PySpark release older than 3.5.
    """
    to_arrow = getattr(df, "toArrow", None)
    if to_arrow is not None:
        table: pa.Table = to_arrow()
        return table
    import pyspark
    from pyspark.sql.pandas.types import to_arrow_schema

    if tuple(int(p) for p in pyspark.__version__.split(".")[:2]) < (3, 5):
        raise InvalidInputError(
            f"PySpark {pyspark.__version__} is not supported: deltasink reads DataFrames "
            f"of PySpark {SUPPORTED_PYSPARK} (Databricks Runtime 14.3 LTS and later). "
            "Upgrade the runtime, or pass a pyarrow.Table."
        )
    schema = to_arrow_schema(df.schema)
    collect = getattr(df, "_collect_as_arrow", None)
    if collect is not None:  # classic 3.5
        batches = collect()
        return pa.Table.from_batches(batches) if batches else schema.empty_table()
    frame = df.toPandas()  # Spark Connect 3.5
    return pa.Table.from_pandas(frame, schema=schema, preserve_index=False)


def _check_names(names: Sequence[str]) -> None:
    if not names:
        raise SchemaMismatchError("the batch has no columns; a batch needs at least one.")
    # Delta (like Spark) resolves column names case-insensitively.
    lowered = Counter(n.lower() for n in names)
    duplicated = sorted(n for n in names if lowered[n.lower()] > 1)
    if duplicated:
        raise SchemaMismatchError(
            f"the batch has duplicate column names {duplicated} (Delta compares names "
            "case-insensitively); rename or drop them.",
            column=duplicated[0],
        )
    reserved = [n for n in names if n.lower().startswith(RESERVED_PREFIX)]
    if reserved:
        raise SchemaMismatchError(
            f"column(s) {reserved} use the prefix {RESERVED_PREFIX!r}, which deltasink "
            "reserves for its own columns; rename them in the job.",
            column=reserved[0],
        )


def delete_expr(predicate: str) -> str:
    return f"coalesce(({predicate}), false) AS {quote(DELETE_COLUMN)}"


def _spark_to_arrow(df: Any, spec: MergeSpec) -> pa.Table:
    _check_names(list(df.columns))
    if not spec.delete_when:
        return spark_arrow(df)
    try:
        flagged = spark_arrow(df.selectExpr("*", delete_expr(spec.delete_when)))
    except InvalidInputError:
        raise
    except Exception as exc:
        try:  # is it the predicate, or the DataFrame itself?
            spark_arrow(df.limit(0))
        except Exception:
            raise exc from None
        raise InvalidInputError(
            f"MergeSpec.delete_when {spec.delete_when!r} is not a valid Spark SQL "
            f"predicate over the batch columns {list(df.columns)}: {exc}"
        ) from exc
    return flagged


def collect(data: object, spec: MergeSpec) -> pa.Table:
    """Turn ``data`` into one Arrow table, adding the delete flag when configured.

    Spark DataFrames are collected through Arrow (``DataFrame.toArrow``, no Python
    row objects). ``delete_when`` is evaluated by Spark SQL: by the DataFrame's own
    session, or, for Arrow input, by the embedded engine.

    Raises:
        InvalidInputError: Unsupported input type, or a ``delete_when`` that does not
            evaluate on this batch.
        SchemaMismatchError: Duplicate or reserved column names.
    """
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    if isinstance(data, pa.RecordBatchReader):
        data = data.read_all()
    if isinstance(data, pa.Table):
        _check_names(data.column_names)
        if not spec.delete_when:
            return data
        return _flag_arrow(data, spec)
    if is_spark_dataframe(data):
        return _spark_to_arrow(data, spec)
    raise InvalidInputError(
        "a batch must be a PySpark DataFrame (classic or Spark Connect), a pyarrow.Table, "
        f"RecordBatch or RecordBatchReader; got {type(data).__module__}.{type(data).__name__}."
    )


def _flag_arrow(data: pa.Table, spec: MergeSpec) -> pa.Table:
    """``data`` with the ``delete_when`` flag appended, evaluated by the embedded engine.

    Only the flag comes back from Spark (matched by row number): the rows themselves stay
    the caller's Arrow data, because a round trip through Spark changes types (a naive
    timestamp returns as a UTC one, and would no longer fit the target)."""
    from deltasink.engine import embedded_spark

    spark = embedded_spark()
    numbered = data.append_column(_ROW, pa.array(np.arange(data.num_rows, dtype=np.int64)))
    if data.num_rows == 0:  # Spark cannot infer a schema from no rows: give it one
        from pyspark.sql.pandas.types import from_arrow_schema

        frame = spark.createDataFrame([], schema=from_arrow_schema(numbered.schema))
    else:
        frame = spark.createDataFrame(numbered)
    assert spec.delete_when is not None
    try:
        flagged = spark_arrow(frame.selectExpr(quote(_ROW), delete_expr(spec.delete_when))).sort_by(
            _ROW
        )
    except InvalidInputError:
        raise
    except Exception as exc:  # the rows came from Arrow: it is the predicate
        raise InvalidInputError(
            f"MergeSpec.delete_when {spec.delete_when!r} is not a valid Spark SQL "
            f"predicate over the batch columns {data.column_names}: {exc}"
        ) from exc
    if not pc.all(pc.equal(flagged.column(_ROW), numbered.column(_ROW))).as_py() and data.num_rows:
        raise AssertionError("the embedded engine lost or repeated rows of the batch")
    return data.append_column(
        pa.field(DELETE_COLUMN, pa.bool_(), True), flagged.column(DELETE_COLUMN)
    )


def check_required(table: pa.Table, spec: MergeSpec) -> None:
    for name in spec.required_columns:
        role = "sequence_by" if name == spec.sequence_by else "key"
        if name not in table.column_names:
            raise KeyColumnError(
                f"{role} column {name!r} is missing from the batch, whose columns are "
                f"{table.column_names}.",
                column=name,
            )
        kind = table.schema.field(name).type
        if pa.types.is_nested(kind):
            raise KeyColumnError(
                f"{role} column {name!r} has the nested type {kind}; keys and sequence "
                "columns must be scalars (numbers, strings, dates, timestamps). Use its "
                "fields as keys instead.",
                column=name,
            )
        nulls = table.column(name).null_count
        if nulls:
            raise KeyColumnError(
                f"{role} column {name!r} is null in {nulls} row(s) of the batch; every row "
                f"needs a {role}. Filter or fill them in the job.",
                column=name,
            )


SortOrder = Literal["ascending", "descending"]


def _first_per_key(
    table: pa.Table, keys: Sequence[str], order: Sequence[tuple[str, SortOrder]]
) -> pa.Table:
    """One row per key: the first by ``order`` (column, "ascending"/"descending"),
    ties going to the later row. Rows keep their original order."""
    columns = list(dict.fromkeys([*keys, *(name for name, _ in order)]))
    indexed = table.select(columns).append_column(
        _ROW, pa.array(np.arange(table.num_rows, dtype=np.int64))
    )
    sort_keys: list[tuple[str, SortOrder]] = [(k, "ascending") for k in keys]
    sort_keys += [*order, (_ROW, "descending")]
    firsts = (
        indexed.take(pc.sort_indices(indexed, sort_keys=sort_keys))
        .group_by(list(keys), use_threads=False)
        .aggregate([(_ROW, "first")])
        .column(f"{_ROW}_first")
    )
    if len(firsts) == table.num_rows:
        return table
    return table.take(pc.take(firsts, pc.sort_indices(firsts)))


def _latest_per_key(table: pa.Table, keys: Sequence[str], sequence_by: str) -> pa.Table:
    """One row per key: the highest ``sequence_by``, ties going to the later row."""
    return _first_per_key(table, keys, [(sequence_by, "descending")])


def _check_unique(table: pa.Table, keys: Sequence[str], hint: str) -> None:
    counts = table.select(list(keys)).group_by(list(keys)).aggregate([([], "count_all")])
    if counts.num_rows == table.num_rows:
        return
    dup = counts.filter(pc.greater(counts.column("count_all"), pa.scalar(1, pa.int64())))
    example = dup.slice(0, 1).to_pylist()[0]
    times = example.pop("count_all")
    raise DuplicateKeyError(
        f"{dup.num_rows} key(s) appear more than once in the batch, e.g. {example} "
        f"({times} times). {hint}",
        column=keys[0],
    )


def prepare(
    table: pa.Table,
    spec: MergeSpec,
    target_schema: pa.Schema | None,
    *,
    target: str,
) -> pa.Table:
    """Validate a collected batch and shape it for staging.

    Args:
        table: The output of :func:`collect`.
        spec: The merge spec.
        target_schema: The target's Arrow schema, or ``None`` if it does not exist yet.
        target: The target's name, for messages.

    Returns:
        The staged form: target types, nullable fields, one row per key (for
        ``upsert``/``insert``), the delete flag last when ``delete_when`` is set.

    Raises:
        KeyColumnError, DuplicateKeyError, SchemaMismatchError: see the module doc.
    """
    check_required(table, spec)
    flag = table.column(DELETE_COLUMN) if DELETE_COLUMN in table.column_names else None
    data = table.drop_columns([DELETE_COLUMN]) if flag is not None else table
    if target_schema is not None:
        data = align_to_target(
            data,
            target_schema,
            evolve=spec.schema_evolution,
            table=target,
            non_null_mask=None if flag is None else pc.invert(flag),
        )
    else:
        data = to_delta_types(data, table=target)
    if flag is not None:
        data = data.append_column(pa.field(DELETE_COLUMN, pa.bool_(), True), flag)
    if spec.keys:
        if spec.sequence_by:
            data = _latest_per_key(data, spec.keys, spec.sequence_by)
        else:
            _check_unique(
                data,
                spec.keys,
                "Deduplicate in the job, or set MergeSpec(sequence_by=...) to keep the "
                "latest row per key.",
            )
    return data


def coalesce(staged: Sequence[tuple[int, pa.Table]], spec: MergeSpec) -> pa.Table:
    """Combine several staged versions into one batch with the same effect as
    applying them one by one, in ascending version order.

    ``append`` concatenates. ``insert`` keeps the row of the earliest version
    (insert-if-absent: the first insert wins). ``upsert`` without ``sequence_by``
    keeps, per key, the row of the latest version, deletes included.

    ``upsert`` with ``sequence_by`` and deletes needs more than one row per key can
    say, because a delete leaves no sequence behind: after ``delete(seq 5)``, an older
    ``upsert(seq 3)`` inserts the key again. Applied one by one, the versions of a key
    act on a target row of sequence ``t`` (absent, or ``t`` null, counting as older
    than everything) like this, where ``Q`` is the highest sequence among them:

    * absent, null, or ``t <= Q``: the key ends as ``R``, a state that does not depend
      on ``t``;
    * ``t > Q``: nothing fires, the target row stays.

    ``R`` is found on the *records* of the key: its rows whose sequence is higher
    than that of every later row (the first record is the last row with sequence
    ``Q``). From the first record on, every state the fold reaches is absent or older
    than the next record, so each record fires: ``R`` is the first record that is an
    upsert, or absent when every record is a delete. The coalesced batch holds ``R``
    (a delete row when absent) and, in :data:`GUARD_COLUMN`, ``Q``, which the MERGE
    compares with the target's sequence instead of the row's own.
    """
    tables = []
    for version, table in staged:
        column = pa.array(np.full(table.num_rows, version, dtype=np.int64))
        tables.append(table.append_column(pa.field(_VERSION, pa.int64()), column))
    combined = pa.concat_tables(tables, promote_options="default")
    if DELETE_COLUMN in combined.column_names:
        flags: Any = pc.fill_null(combined.column(DELETE_COLUMN), pa.scalar(False))
        index = combined.column_names.index(DELETE_COLUMN)
        combined = combined.set_column(index, pa.field(DELETE_COLUMN, pa.bool_(), True), flags)
    if spec.mode == "upsert" and spec.sequence_by and DELETE_COLUMN in combined.column_names:
        combined = _fold_with_deletes(combined, spec.keys, spec.sequence_by)
    elif spec.mode == "upsert":
        order: list[tuple[str, SortOrder]] = (
            [(spec.sequence_by, "descending")] if spec.sequence_by else []
        )
        combined = _first_per_key(combined, spec.keys, [*order, (_VERSION, "descending")])
    elif spec.mode == "insert":
        combined = _first_per_key(combined, spec.keys, [(_VERSION, "ascending")])
    return combined.drop_columns([_VERSION])


def _fold_with_deletes(combined: pa.Table, keys: Sequence[str], sequence_by: str) -> pa.Table:
    """The ``R`` row and the ``Q`` guard of every key (see :func:`coalesce`).

    ``combined`` holds at most one row per key and version; vectorised over all keys:
    rows sorted by key and version, segmented suffix maxima of the sequence's dense
    rank give the records.
    """
    order = pc.sort_indices(
        combined, sort_keys=[*((k, "ascending") for k in keys), (_VERSION, "ascending")]
    )
    rows = combined.take(order)
    n = rows.num_rows
    if n == 0:
        return rows.append_column(
            pa.field(GUARD_COLUMN, rows.schema.field(sequence_by).type, True),
            rows.column(sequence_by),
        )
    # Group boundaries: a row starts a group when any key differs from the row before.
    starts = np.zeros(n, dtype=bool)
    starts[0] = True
    for key in keys:
        column: Any = rows.column(key)
        differs: Any = pc.fill_null(pc.not_equal(column.slice(1), column.slice(0, n - 1)), True)
        starts[1:] |= np.asarray(differs.to_numpy(zero_copy_only=False), dtype=bool)
    group = np.cumsum(starts) - 1
    rank = np.asarray(
        pc.rank(rows.column(sequence_by), sort_keys="ascending", tiebreaker="dense").to_numpy(),
        dtype=np.int64,
    )
    width = int(rank.max()) + 1
    # Suffix maximum of the rank within each group (inclusive), by a cumulative max
    # over the reversed rows with each group lifted above every later-visited one.
    lifted = rank - group * width
    suffix = np.maximum.accumulate(lifted[::-1])[::-1] + group * width
    later = np.full(n, -1, dtype=np.int64)  # highest rank strictly after the row
    same = group[1:] == group[:-1]
    later[:-1] = np.where(same, suffix[1:], -1)
    record = rank > later
    deletes = np.asarray(rows.column(DELETE_COLUMN).to_numpy(zero_copy_only=False), dtype=bool)
    first_record = np.full(group[-1] + 1, n, dtype=np.int64)
    first_upsert = np.full(group[-1] + 1, n, dtype=np.int64)
    positions = np.arange(n, dtype=np.int64)
    np.minimum.at(first_record, group[record], positions[record])
    upsert_records = record & ~deletes
    np.minimum.at(first_upsert, group[upsert_records], positions[upsert_records])
    chosen = np.where(first_upsert < n, first_upsert, first_record)
    result = rows.take(chosen)
    guard = rows.column(sequence_by).take(first_record)
    return result.append_column(
        pa.field(GUARD_COLUMN, rows.schema.field(sequence_by).type, True), guard
    )
