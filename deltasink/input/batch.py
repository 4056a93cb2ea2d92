"""Batches: user input (a PySpark DataFrame or Arrow data) to a validated Arrow table.

Validation is vectorised in Arrow and happens before anything is written:
reserved and duplicate column names, key and ``sequence_by`` columns present and
non-null, types compatible with the target, float keys normalised (-0.0 is 0.0; NaN
refused), and one row per key (or the latest row per key with ``sequence_by``).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltasink.errors import (
    InvalidInputError,
    KeyColumnError,
    SchemaMismatchError,
)
from deltasink.shapes.partitions import blank_keys
from deltasink.shapes.schema import align_to_target, to_delta_types
from deltasink.shapes.sparksql.fields import types_of
from deltasink.shapes.spec import MergeSpec

from .arrow import SparkToArrow, check_names, is_spark_dataframe, spark_to_arrow
from .keys import check_unique, latest_per_key, normalise_keys
from .rows import arrow_frame, check_row_predicates, flag_arrow
from .sql import DELETE_COLUMN

__all__ = ["SCD2_DUPLICATES", "check_missing_columns", "check_required", "collect", "prepare"]

#: The advice of an ``scd2`` batch's :class:`DuplicateKeyError`.
SCD2_DUPLICATES = (
    "An scd2 batch has one event per key and sequence_by value (the same pair in a "
    "later version corrects it); deduplicate in the job."
)


def collect(data: object, spec: MergeSpec, *, to_arrow: SparkToArrow | None = None) -> pa.Table:
    """Turn ``data`` into one Arrow table, adding the delete flag when configured.

    Spark DataFrames are collected through Arrow (``DataFrame.toArrow``, no Python
    row objects), or by ``to_arrow`` when given (the embedded engine's
    :func:`~deltasink.backends.embedded.transfer.engine_arrow`). ``delete_when`` is
    evaluated by Spark SQL: by the DataFrame's own session, or, for Arrow input, by the
    embedded engine.

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
        check_names(data.column_names)
        if spec.replace_where or spec.target_predicate:
            check_row_predicates(arrow_frame(data), spec, data.column_names, types_of(data.schema))
        if not spec.delete_when:
            return data
        return flag_arrow(data, spec)
    if is_spark_dataframe(data):
        frame: Any = data
        check_names(list(frame.columns))
        if spec.replace_where or spec.target_predicate:
            check_row_predicates(frame, spec, list(frame.columns))
        return spark_to_arrow(frame, spec, to_arrow=to_arrow)
    raise InvalidInputError(
        "a batch must be a PySpark DataFrame (classic or Spark Connect), a pyarrow.Table, "
        f"RecordBatch or RecordBatchReader; got {type(data).__module__}.{type(data).__name__}."
    )


def check_required(table: pa.Table, spec: MergeSpec) -> None:
    """The key and ``sequence_by`` columns are present, scalar and non-null; the
    ``update_columns``/``except_columns`` are present.

    Raises:
        KeyColumnError: A key or ``sequence_by`` column is missing, nested or null.
        SchemaMismatchError: A column ``update_columns``/``except_columns`` names is
            missing from the batch.
    """
    for name in spec.required_columns:
        role = spec.role(name)
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
        if nulls and not spec.nullable(name):
            raise KeyColumnError(
                f"{role} column {name!r} is null in {nulls} row(s) of the batch; every row "
                f"needs a {role}. Filter or fill them in the job.",
                column=name,
            )

    for name in spec.replace_by or ():
        kind = table.schema.field(name).type
        if not (
            pa.types.is_integer(kind)
            or pa.types.is_string(kind)
            or pa.types.is_large_string(kind)
            or pa.types.is_date(kind)
        ):
            raise KeyColumnError(
                f"replace_by column {name!r} has the type {kind}; replace_by columns must "
                "be integers, strings or dates (their values become SQL literals).",
                column=name,
            )
    listing = "update_columns" if spec.update_columns is not None else "except_columns"
    missing = [c for c in spec.listed_columns if c not in table.column_names]
    if missing:
        raise SchemaMismatchError(
            f"MergeSpec.{listing} names {missing}, missing from the batch, whose columns "
            f"are {[c for c in table.column_names if c != DELETE_COLUMN]}; every batch "
            "must contain them.",
            column=missing[0],
        )


#: What a batch lacking a target column would do, by mode (the modes that refuse it).
_MISSING_EFFECT = {
    "upsert": "inserted rows would get null there and matched rows keep their old values",
    "insert": "inserted rows would get null there",
    "scd2": "new history rows would get null there",
}


def check_missing_columns(
    columns: Collection[str],
    target_schema: pa.Schema | None,
    spec: MergeSpec,
    *,
    table: str,
    computed: Collection[str] = (),
) -> None:
    """Refuse an ``upsert``, ``insert`` or ``scd2`` batch with ``columns`` that lacks a
    column of ``target_schema`` (the schema it is published into), unless
    ``spec.allow_missing_columns`` or ``spec.schema_evolution``: as Delta's MERGE, which
    refuses it without schema evolution (its ``UPDATE SET *`` / ``INSERT *`` find no
    source column) and takes it with (null for inserted rows, matched rows kept). Columns the
    writer fills itself (``computed``: generated, default and identity columns; the
    ``scd2`` history columns) are not missing. ``append`` and ``replace`` take a subset,
    as Delta's DataFrame writes do.

    Raises:
        SchemaMismatchError: Naming the missing columns and the way out.
    """
    effect = _MISSING_EFFECT.get(spec.mode)
    if effect is None or target_schema is None:
        return
    if spec.allow_missing_columns or spec.schema_evolution:
        return
    own = {*computed, *(spec.history if spec.mode == "scd2" else ())}
    present = set(columns)
    missing = [
        f.name
        for f in target_schema
        if f.name not in present and f.name not in own and f.name != DELETE_COLUMN
    ]
    if not missing:
        return
    raise SchemaMismatchError(
        f"the batch lacks column(s) {missing} of target {table}: with "
        f"MergeSpec(mode={spec.mode!r}) {effect} (Delta's MERGE refuses such a batch). "
        "Nothing was staged. Add the column(s) to the batch, or, if the batches carry a "
        "subset of the columns on purpose, set MergeSpec(allow_missing_columns=True).",
        table=table,
        column=missing[0],
    )


def _check_history_columns(
    table: pa.Table, spec: MergeSpec, target_schema: pa.Schema | None, target: str
) -> None:
    """An ``scd2`` batch does not have the history columns; an existing target does,
    typed like ``sequence_by`` (and boolean).

    Raises:
        SchemaMismatchError: Either is not so.
    """
    names = spec.history
    clash = [c for c in names if c in table.column_names]
    if clash:
        raise SchemaMismatchError(
            f"the batch has the column(s) {clash}, which MergeSpec(mode='scd2') writes "
            "itself (history_columns); drop or rename them in the job, or pick other "
            "history_columns.",
            column=clash[0],
        )
    if target_schema is None:
        return
    seq = spec.sequence_by
    assert seq is not None
    wanted = {names[0]: None, names[1]: None, names[2]: pa.bool_()}
    for name, kind in wanted.items():
        if name not in target_schema.names:
            raise SchemaMismatchError(
                f"target {target} has no column {name!r}: an scd2 target needs the "
                f"history columns {list(names)}; it was not created by an scd2 sink, or "
                "with other history_columns.",
                table=target,
                column=name,
            )
        found = target_schema.field(name).type
        expected = kind or (target_schema.field(seq).type if seq in target_schema.names else found)
        if not found.equals(expected):
            raise SchemaMismatchError(
                f"target {target} stores {name!r} as {found}, but scd2 writes it as "
                f"{expected} (the type of {seq!r}, or boolean for is_current).",
                table=target,
                column=name,
            )


def prepare(
    table: pa.Table,
    spec: MergeSpec,
    target_schema: pa.Schema | None,
    *,
    target: str,
    blank: Sequence[str] = (),
    computed: Collection[str] = (),
) -> pa.Table:
    """Validate a collected batch and shape it for staging.

    Args:
        table: The output of :func:`collect`.
        spec: The merge spec.
        target_schema: The target's Arrow schema, or ``None`` if it does not exist yet.
        target: The target's name, for messages.
        blank: The target's string partition columns (those of the ``TableSpec`` for a
            new one): a null key value there is the key ``''``
            (:func:`~deltasink.shapes.partitions.blank_keys`).
        computed: The target's generated, default and identity columns, which a
            batch may lack (:func:`check_missing_columns`).

    Returns:
        The staged form: target types, nullable fields, float keys normalised
        (:func:`normalise_keys`: -0.0 is 0.0), a string partition key's null made
        ``''`` (the one null partition), one row per key (for ``upsert``/``insert``),
        the delete flag last when ``delete_when`` is set.

    Raises:
        KeyColumnError, DuplicateKeyError, SchemaMismatchError: see the module doc; a
            MERGE mode's batch lacking a target column without
            ``allow_missing_columns`` (:func:`check_missing_columns`).
        InvalidKeyError: A float key is NaN.
    """
    check_required(table, spec)
    if spec.mode == "scd2":
        _check_history_columns(table, spec, target_schema, target)
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
        check_missing_columns(
            data.column_names, target_schema, spec, table=target, computed=computed
        )
    else:
        data = to_delta_types(data, table=target)
    if flag is not None:
        data = data.append_column(pa.field(DELETE_COLUMN, pa.bool_(), True), flag)
    data = blank_keys(normalise_keys(data, spec.keys), spec.keys, blank)
    if spec.mode == "scd2":
        check_unique(data, spec.event_columns, SCD2_DUPLICATES)
    elif spec.keys:
        if spec.sequence_by:
            data = latest_per_key(data, spec.keys, spec.sequence_by)
        else:
            check_unique(
                data,
                spec.keys,
                "Deduplicate in the job, or set MergeSpec(sequence_by=...) to keep the "
                "latest row per key.",
            )
    return data
