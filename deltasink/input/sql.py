"""The Spark SQL names a batch is read and staged with, on both engines: identifier
quoting, the reserved delete-flag and sequence-guard columns, the delete flag's
expression."""

from __future__ import annotations

from deltasink.shapes.spec import MergeSpec

__all__ = ["DELETE_COLUMN", "GUARD_COLUMN", "ROW_COLUMN", "delete_expr", "quote"]


#: Staged boolean column: the row deletes its key (``MergeSpec.delete_when``).
DELETE_COLUMN = "_deltasink_delete"
#: Coalesced batches only: the sequence value a target row is compared with (see
#: :func:`deltasink.core.coalesce.coalesce`); never written to a table.
GUARD_COLUMN = "_deltasink_sequence_guard"
#: A row's number in its batch, while the batch is de-duplicated or flagged.
ROW_COLUMN = "_deltasink_row"


def quote(name: str) -> str:
    """Quote a column name for Spark SQL and delta-rs predicates (backticks)."""
    return "`" + name.replace("`", "``") + "`"


def delete_expr(spec: MergeSpec) -> str:
    """The Spark SQL column of the delete flag: ``spec.delete_when`` as parsed and
    re-emitted (:meth:`MergeSpec.predicate`), a null result counting as false."""
    predicate = spec.predicate("delete_when", "spark")
    assert predicate is not None
    return f"coalesce(({predicate}), false) AS {quote(DELETE_COLUMN)}"
