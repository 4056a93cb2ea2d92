"""Arrow schema checks: does a batch fit the target table, and casting it so it does.

Only casts that cannot lose information by type are allowed (integer and float
widening, string/binary flavours, decimal widening, timestamp units, nested types
field by field). Everything else is a :class:`~deltasink.errors.SchemaMismatchError`
naming the column, the type found and the type expected.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from deltasink.errors import SchemaMismatchError

__all__ = [
    "align_to_target",
    "describe_type",
    "is_lossless_cast",
    "nullable_schema",
    "to_delta_types",
]

_INT_BITS = {
    pa.int8(): (8, True),
    pa.int16(): (16, True),
    pa.int32(): (32, True),
    pa.int64(): (64, True),
    pa.uint8(): (8, False),
    pa.uint16(): (16, False),
    pa.uint32(): (32, False),
    pa.uint64(): (64, False),
}
# Decimal digits needed to hold every value of an integer type.
_INT_DIGITS = {8: 3, 16: 5, 32: 10, 64: 20}
_FLOAT_BITS = {pa.float16(): 16, pa.float32(): 32, pa.float64(): 64}
# Integer bits a float mantissa holds exactly.
_FLOAT_EXACT_INT_BITS = {16: 11, 32: 24, 64: 53}


def _string_like(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t))


def _binary_like(t: pa.DataType) -> bool:
    return bool(pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t))


def _list_like(t: pa.DataType) -> bool:
    return bool(pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t))


def is_lossless_cast(src: Any, dst: Any) -> bool:
    """Whether every value of type ``src`` is representable in ``dst`` unchanged."""
    if pa.types.is_dictionary(src):
        return is_lossless_cast(src.value_type, dst)
    if src.equals(dst) or pa.types.is_null(src):
        return True
    if src in _INT_BITS and dst in _INT_BITS:
        (sb, ss), (db, ds) = _INT_BITS[src], _INT_BITS[dst]
        return (ss == ds and db >= sb) or (not ss and ds and db > sb)
    if src in _INT_BITS and dst in _FLOAT_BITS:
        return _INT_BITS[src][0] <= _FLOAT_EXACT_INT_BITS[_FLOAT_BITS[dst]]
    if src in _FLOAT_BITS and dst in _FLOAT_BITS:
        return _FLOAT_BITS[dst] >= _FLOAT_BITS[src]
    if src in _INT_BITS and pa.types.is_decimal(dst):
        return bool(dst.precision - dst.scale >= _INT_DIGITS[_INT_BITS[src][0]])
    if pa.types.is_decimal(src) and pa.types.is_decimal(dst):
        return bool(
            dst.scale >= src.scale and dst.precision - dst.scale >= src.precision - src.scale
        )
    if _string_like(src) and _string_like(dst):
        return True
    if _binary_like(src) and _binary_like(dst):
        return True
    if pa.types.is_date(src) and pa.types.is_date(dst):
        return True
    if pa.types.is_timestamp(src) and pa.types.is_timestamp(dst):
        # Same instant semantics (both zoned or both local); the unit is checked
        # per value by a safe cast (nanoseconds that are whole microseconds pass).
        return (src.tz is None) == (dst.tz is None)
    if pa.types.is_date(src) and pa.types.is_timestamp(dst):
        return False
    if _list_like(src) and _list_like(dst):
        return is_lossless_cast(src.value_type, dst.value_type)
    if pa.types.is_map(src) and pa.types.is_map(dst):
        return is_lossless_cast(src.key_type, dst.key_type) and is_lossless_cast(
            src.item_type, dst.item_type
        )
    if pa.types.is_struct(src) and pa.types.is_struct(dst):
        dst_fields = {f.name: f for f in dst}
        src_names = {f.name for f in src}
        if any(f.name not in dst_fields for f in src):
            return False
        if any(f.name not in src_names and not f.nullable for f in dst):
            return False
        return all(is_lossless_cast(f.type, dst_fields[f.name].type) for f in src)
    return False


def describe_type(t: pa.DataType) -> str:
    """A short, readable name for an Arrow type."""
    return str(t)


def _nullable_type(t: Any) -> Any:
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _nullable_type(f.type), True) for f in t])
    if pa.types.is_large_list(t):
        return pa.large_list(pa.field("element", _nullable_type(t.value_type), True))
    if _list_like(t):
        return pa.list_(pa.field("element", _nullable_type(t.value_type), True))
    if pa.types.is_map(t):
        return pa.map_(t.key_type, pa.field("value", _nullable_type(t.item_type), True))
    return t


def nullable_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every field (nested ones too) nullable, metadata dropped.

    Spark marks literal-derived columns NOT NULL by accident; the staging table and a
    target created by deltasink are nullable everywhere, as Spark's own writers do.
    """
    return pa.schema([pa.field(f.name, _nullable_type(f.type), True) for f in schema])


def align_to_target(
    batch: pa.Table,
    target: pa.Schema,
    *,
    evolve: bool,
    table: str,
    non_null_mask: pa.ChunkedArray[Any] | pa.Array[Any] | None = None,
) -> pa.Table:
    """Cast ``batch`` to the target's column types, checking every column.

    Args:
        batch: The batch, with deltasink's system columns already removed.
        target: The target table's Arrow schema.
        evolve: Keep batch columns the target lacks (schema evolution) instead of
            rejecting them.
        table: The target's name, for messages.
        non_null_mask: Rows that will be written as values (i.e. not deletes); NOT
            NULL target columns are only checked on those. ``None`` means all rows.

    Returns:
        The batch with the target's types (all fields nullable) in the batch's order.

    Raises:
        SchemaMismatchError: A column is unknown to the target, has a type that cannot
            be cast without loss, or is null where the target says NOT NULL; or the
            batch lacks a NOT NULL target column.
    """
    fields = {f.name: f for f in target}
    lower = {name.lower(): name for name in fields}
    columns: list[pa.ChunkedArray[Any]] = []
    out_fields: list[pa.Field[Any]] = []
    for name, column in zip(batch.column_names, batch.columns, strict=True):
        dst = fields.get(name)
        if dst is None:
            if name.lower() in lower:
                raise SchemaMismatchError(
                    f"column {name!r} is not in target {table}; the target has "
                    f"{lower[name.lower()]!r} (column names are case-sensitive). "
                    "Rename the batch column.",
                    table=table,
                    column=name,
                )
            if not evolve:
                raise SchemaMismatchError(
                    f"column {name!r} ({describe_type(column.type)}) is not in target "
                    f"{table}, whose columns are {list(fields)}. Drop it from the batch, "
                    "add it to the table, or set MergeSpec(schema_evolution=True).",
                    table=table,
                    column=name,
                )
            columns.append(column)
            out_fields.append(pa.field(name, _nullable_type(column.type), True))
            continue
        if not is_lossless_cast(column.type, dst.type):
            raise SchemaMismatchError(
                f"column {name!r} has type {describe_type(column.type)} but target {table} "
                f"stores {describe_type(dst.type)}, and the cast could lose data. Cast the "
                "column in the job (e.g. F.col(...).cast(...)) or change the table.",
                table=table,
                column=name,
            )
        try:
            cast = column.cast(_nullable_type(dst.type), safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise SchemaMismatchError(
                f"column {name!r} cannot be cast from {describe_type(column.type)} to "
                f"{describe_type(dst.type)} for target {table}: {exc}",
                table=table,
                column=name,
            ) from exc
        if not dst.nullable and cast.null_count:
            values = cast if non_null_mask is None else cast.filter(non_null_mask)
            if values.null_count:
                raise SchemaMismatchError(
                    f"column {name!r} is NOT NULL in target {table} but {values.null_count} "
                    "row(s) of the batch are null. Fill or filter them in the job.",
                    table=table,
                    column=name,
                )
        columns.append(cast)
        out_fields.append(pa.field(name, cast.type, True))
    missing = [f.name for f in target if not f.nullable and f.name not in batch.column_names]
    if missing:
        raise SchemaMismatchError(
            f"target {table} has NOT NULL column(s) {missing} that the batch lacks; "
            "inserted rows would break the constraint. Add them to the batch.",
            table=table,
            column=missing[0],
        )
    return pa.Table.from_arrays(columns, schema=pa.schema(out_fields))


def _delta_type(t: Any, column: str, table: str) -> Any:
    """The Delta-storable type for ``t``, or :class:`SchemaMismatchError`."""

    def refuse(why: str) -> SchemaMismatchError:
        return SchemaMismatchError(
            f"column {column!r} has type {describe_type(t)}, {why}. Cast it in the job "
            f"before writing to {table}.",
            table=table,
            column=column,
        )

    if pa.types.is_dictionary(t):
        return _delta_type(t.value_type, column, table)
    if pa.types.is_null(t):
        raise refuse("which has no values to infer a Delta type from (an all-null literal)")
    if pa.types.is_unsigned_integer(t):
        return {8: pa.int16(), 16: pa.int32(), 32: pa.int64(), 64: pa.int64()}[t.bit_width]
    if pa.types.is_float16(t):
        return pa.float32()
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz=t.tz)  # Delta stores microseconds
    if pa.types.is_date64(t):
        return pa.date32()
    if pa.types.is_decimal(t):
        if t.precision > 38:
            raise refuse("beyond Delta's largest decimal, decimal(38, s)")
        return pa.decimal128(t.precision, t.scale)
    if pa.types.is_time(t) or pa.types.is_duration(t) or pa.types.is_interval(t):
        raise refuse("which Delta has no type for")
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _delta_type(f.type, column, table), True) for f in t])
    if _list_like(t):
        return pa.list_(pa.field("element", _delta_type(t.value_type, column, table), True))
    if pa.types.is_map(t):
        return pa.map_(
            _delta_type(t.key_type, column, table),
            pa.field("value", _delta_type(t.item_type, column, table), True),
        )
    return _nullable_type(t)


def to_delta_types(batch: pa.Table, *, table: str) -> pa.Table:
    """Cast a batch for a target that does not exist yet to types Delta stores.

    Unsigned integers widen (``uint64`` must fit a signed long), ``float16`` widens,
    timestamps become microseconds (values with sub-microsecond parts are refused,
    never truncated), dictionaries are decoded; types Delta has no equivalent for
    (time of day, durations, all-null columns, decimals beyond 38 digits) are refused.
    Every field becomes nullable.

    Raises:
        SchemaMismatchError: A column cannot be stored without loss.
    """
    columns = []
    fields = []
    for field, column in zip(batch.schema, batch.columns, strict=True):
        target_type = _delta_type(field.type, field.name, table)
        try:
            cast = (
                column if column.type.equals(target_type) else column.cast(target_type, safe=True)
            )
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise SchemaMismatchError(
                f"column {field.name!r} cannot be stored as {describe_type(target_type)} "
                f"without loss ({exc}). Cast or round it in the job.",
                table=table,
                column=field.name,
            ) from exc
        columns.append(cast)
        fields.append(pa.field(field.name, target_type, True))
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))
