"""One row per key: float keys normalised (-0.0 is 0.0, NaN refused), duplicate keys found
(by a sort for one integer or float key, else by hash aggregation), and the first, last
or latest row per key kept."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltasink.errors import (
    DuplicateKeyError,
    InvalidKeyError,
)
from deltasink.reserved import column

from .sql import ROW_COLUMN

__all__ = [
    "SortOrder",
    "check_unique",
    "distinct_floats",
    "distinct_ints",
    "edge_per_key",
    "first_per_key",
    "latest_per_key",
    "nan_key_error",
    "normalise_keys",
]


def nan_key_error(column: str, rows: int) -> InvalidKeyError:
    """The error for ``rows`` NaN values in the float key ``column`` (both engines)."""
    return InvalidKeyError(
        f"key column {column!r} is NaN in {rows} row(s) of the batch; a NaN key matches "
        "no row (NaN equals nothing), so deltasink refuses it in every mode. Filter the "
        "rows or map NaN to a real value (or null, with null_safe_keys) in the job.",
        column=column,
    )


def normalise_keys(table: pa.Table, keys: Sequence[str], *, refuse_nan: bool = True) -> pa.Table:
    """One equality per key type: floating-point key values -0.0 become 0.0 (they are
    equal, and must be one key in the staged batch, its duplicate check and every later
    MERGE), and a NaN key value is refused (unless ``refuse_nan`` is false: staged data
    of an earlier release is only normalised). Other columns and types are untouched;
    keys are scalars (:func:`check_required`).

    Raises:
        InvalidKeyError: A float key holds NaN.
    """
    for key in keys:
        if key not in table.column_names:
            continue
        field = table.schema.field(key)
        if not pa.types.is_floating(field.type):
            continue
        column = table.column(key)
        if refuse_nan:
            nans = pc.sum(pc.cast(pc.is_nan(column), pa.int64())).as_py() or 0
            if nans:
                raise nan_key_error(key, nans)
        zero = pa.scalar(0, field.type)
        normal = pc.if_else(pc.equal(column, zero), zero, column)  # -0.0 == 0.0
        table = table.set_column(table.column_names.index(key), field, normal)
    return table


SortOrder = Literal["ascending", "descending"]


def first_per_key(
    table: pa.Table, keys: Sequence[str], order: Sequence[tuple[str, SortOrder]]
) -> pa.Table:
    """One row per key: the first by ``order`` (column, "ascending"/"descending"),
    ties going to the later row. Rows keep their original order.

    The rows are sorted by key then ``order``; the first row of each key is where the
    key changes in that order (:func:`_group_starts`, for key types whose equality is
    exact), else the first of a hash aggregation over the sorted rows."""
    columns = list(dict.fromkeys([*keys, *(name for name, _ in order)]))
    indexed = table.select(columns).append_column(
        ROW_COLUMN, pa.array(np.arange(table.num_rows, dtype=np.int64))
    )
    sort_keys: list[tuple[str, SortOrder]] = [(k, "ascending") for k in keys]
    sort_keys += [*order, (ROW_COLUMN, "descending")]
    ordered = indexed.take(pc.sort_indices(indexed, sort_keys=sort_keys))
    starts = _group_starts(ordered, keys)
    if starts is not None:
        firsts = ordered.column(ROW_COLUMN).filter(starts)
    else:
        firsts = (
            ordered.group_by(list(keys), use_threads=False)
            .aggregate([(ROW_COLUMN, "first")])
            .column(f"{ROW_COLUMN}_first")
        )
    if len(firsts) == table.num_rows:
        return table
    return table.take(pc.take(firsts, pc.sort_indices(firsts)))


def edge_per_key(table: pa.Table, keys: Sequence[str], *, last: bool) -> pa.Table:
    """One row per key: the first row of each key in row order, or with ``last`` the
    last one. Rows keep their original order.

    :func:`first_per_key` with the row order as the only order, in one stable sort by
    the keys (no tie-break columns, no second sort to restore the order) for key types
    with exact equality; through :func:`first_per_key` otherwise."""
    n = table.num_rows
    keyed = table.select(list(keys))
    if n == 0:
        return table
    if not all(_exact_equality(keyed.schema.field(k).type) for k in keys):
        if last:
            return first_per_key(table, keys, [])
        position = column("position")
        indexed = table.append_column(position, pa.array(np.arange(n, dtype=np.int64)))
        return first_per_key(indexed, keys, [(position, "ascending")]).drop_columns([position])
    order = pc.sort_indices(keyed, sort_keys=[(k, "ascending") for k in keys])  # stable
    starts = _group_starts(keyed.take(order), keys)
    assert starts is not None  # exact key types
    edges = np.asarray(starts.to_numpy(zero_copy_only=False), dtype=bool)
    if last:  # a group's last row is the one before the next group's start
        edges = np.append(edges[1:], True)
    if edges.all():
        return table
    keep = np.zeros(n, dtype=bool)
    keep[order.to_numpy()[edges]] = True
    return table.filter(pa.array(keep))


def _exact_equality(column_type: pa.DataType) -> bool:
    """Key types whose ``not_equal`` is the grouping's equality (no NaN, no
    collation, no nesting)."""
    return (
        pa.types.is_integer(column_type)
        or pa.types.is_string(column_type)
        or pa.types.is_large_string(column_type)
        or pa.types.is_binary(column_type)
        or pa.types.is_large_binary(column_type)
        or pa.types.is_boolean(column_type)
        or pa.types.is_date(column_type)
        or pa.types.is_timestamp(column_type)
        or pa.types.is_decimal(column_type)
    )


def _group_starts(ordered: pa.Table, keys: Sequence[str]) -> pa.Array[Any] | None:
    """For rows sorted by ``keys``: a mask of the first row of each key (a null equal to
    a null, as in a grouping); ``None`` if a key's type is not exactly comparable."""
    n = ordered.num_rows
    if not all(_exact_equality(ordered.schema.field(k).type) for k in keys):
        return None
    changed = np.zeros(max(n - 1, 0), dtype=bool)
    for key in keys:
        column = ordered.column(key)
        later, earlier = column.slice(1), column.slice(0, max(n - 1, 0))
        unequal: Any = pc.not_equal(later, earlier)
        nulls: Any = pc.not_equal(pc.is_null(later), pc.is_null(earlier))
        changed |= pc.or_(pc.fill_null(unequal, False), nulls).to_numpy(zero_copy_only=False)
    starts = np.ones(n, dtype=bool)
    starts[1:] = changed
    return pa.array(starts)


def latest_per_key(table: pa.Table, keys: Sequence[str], sequence_by: str) -> pa.Table:
    """One row per key: the highest ``sequence_by``, ties going to the later row."""
    return first_per_key(table, keys, [(sequence_by, "descending")])


#: :func:`distinct_ints` marks a key's values in a bitmap of one byte per value in the
#: batch's key range when that range is at most this many times the row count (plus
#: :data:`_BITMAP_SLACK`): a few MB for a million rows.
_BITMAP_PER_ROW = 16


_BITMAP_SLACK = 1 << 16


def distinct_ints(column: pa.ChunkedArray[Any] | pa.Array[Any]) -> bool | None:
    """Whether the values of an integer column without nulls are all distinct, decided
    exactly with a bitmap over the column's value range (linear, no hashing); ``None``
    when that does not apply (another type, nulls, or a range too wide for the bitmap).

    The fast twin of the hash aggregation in :func:`check_unique`, which stays the
    fallback and the one that reports duplicates; ``test_optimizations.py`` compares
    the two on generated columns."""
    n = len(column)
    if n < 2:
        return True
    if not pa.types.is_integer(column.type) or column.null_count:
        return None
    low, high = (int(v.as_py()) for v in pc.min_max(column).values())
    span = high - low + 1
    if span < n:
        return False  # more values than room for them
    if span > _BITMAP_PER_ROW * n + _BITMAP_SLACK:
        return None
    values = column.to_numpy()
    # Offsets from the lowest value fit in int64 (span is small); subtract in the
    # widest type of the column's signedness, so a narrow type cannot wrap.
    wide = values.astype(np.uint64 if values.dtype.kind == "u" else np.int64, copy=False)
    offsets = wide - wide.dtype.type(low)
    seen = np.zeros(span, dtype=np.bool_)
    seen[offsets] = True
    return int(np.count_nonzero(seen)) == n


def distinct_floats(column: pa.ChunkedArray[Any] | pa.Array[Any]) -> bool | None:
    """Whether the values of a floating-point column without nulls or NaN are all
    distinct, decided exactly by sorting (equal values, 0.0 and -0.0 included, sit side
    by side); ``None`` when that does not apply (another type, nulls or NaN).

    Arrow's hash aggregation on doubles grows faster than linearly (100k distinct keys:
    seconds), a sort does not. The fast twin of that aggregation in
    :func:`check_unique`, which stays the fallback and the one that reports duplicates;
    ``test_optimizations.py`` compares the two on generated columns."""
    if not pa.types.is_floating(column.type) or column.null_count:
        return None
    values = np.sort(column.to_numpy())
    if len(values) and np.isnan(values[-1]):  # NaN sorts last; it equals nothing
        return None
    return not bool(np.any(values[1:] == values[:-1]))


def check_unique(table: pa.Table, keys: Sequence[str], hint: str) -> None:
    if len(keys) == 1:
        column = table.column(keys[0])
        if distinct_ints(column) or distinct_floats(column):
            return
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
