"""One partition rule, the Delta protocol's: an empty string in a partition column is null.

The protocol ("Partition Value Serialization") stores partition values as strings and
says that "an empty string for any type translates to a null partition value". A
string partition column therefore cannot hold ``''``: delta-spark writes a batch's
``''`` there as null, while delta-rs 1.6 records it as ``""`` (which the protocol reads
as null, delta-rs's own reader too, but delta-spark reads back as ``''``). deltasink
follows the protocol on both engines:

* **write**: a ``''`` in a string partition column is written as null
  (:func:`blank_as_null` on Arrow data; ``nullif`` in the MERGE assignments);
* **keys**: in a key column that is a string partition column, ``''`` and null are
  one key value, the null partition; the validated batch carries it as ``''``
  (:func:`blank_keys`), so its duplicate check and coalescing see one key, and the
  MERGE matches it with ``coalesce(t.col, '') = coalesce(s.col, '')``, which also
  matches a ``""`` another writer recorded;
* **slices**: a ``replace_by`` value ``''`` selects the null partition (and a ``""``
  one), see :func:`deltasink.shapes.merge.replace_predicate`.

A null key value is still refused without ``null_safe_keys`` (as in any key column);
``''`` is accepted there and means the null partition.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["blank_as_null", "blank_keys", "string_partitions"]


def _is_string(kind: pa.DataType) -> bool:
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind))


def string_partitions(schema: pa.Schema | None, partition_by: Iterable[str]) -> tuple[str, ...]:
    """The ``partition_by`` columns that are string columns of ``schema`` (whose ``''``
    is null), in ``partition_by``'s order; none without a schema."""
    if schema is None:
        return ()
    names = set(schema.names)
    return tuple(c for c in partition_by if c in names and _is_string(schema.field(c).type))


def blank_as_null(table: pa.Table, columns: Sequence[str]) -> pa.Table:
    """``table`` with each ``''`` of ``columns`` (string partition columns) made null,
    as the protocol reads it: what a writer must record."""
    for name in columns:
        if name not in table.column_names:
            continue
        field = table.schema.field(name)
        if not _is_string(field.type):
            continue
        column = table.column(name)
        empty = pc.equal(column, pa.scalar("", field.type))
        if not pc.any(empty).as_py():
            continue
        nulled = pc.if_else(empty, pa.scalar(None, field.type), column)
        table = table.set_column(table.column_names.index(name), field, nulled)
    return table


def blank_keys(table: pa.Table, keys: Sequence[str], blank: Sequence[str]) -> pa.Table:
    """``table`` with each null of the ``keys`` that are string partition columns
    (``blank``) made ``''``: in such a column ``''`` and null are one key value (the null
    partition), carried as ``''`` through validation, staging and coalescing."""
    for name in keys:
        if name not in blank or name not in table.column_names:
            continue
        field = table.schema.field(name)
        column = table.column(name)
        if not _is_string(field.type) or column.null_count == 0:
            continue
        filled = pc.fill_null(column, pa.scalar("", field.type))
        table = table.set_column(table.column_names.index(name), field, filled)
    return table
