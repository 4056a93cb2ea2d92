"""Every name deltasink reserves: the ``_deltasink_`` prefix of its own columns and the
columns it adds to a batch, the staging table or a plan while it works.

A user's column may not start with :data:`PREFIX` (:class:`~deltasink.MergeSpec` and
the batch validation refuse it), so none of these names can collide with one. The
columns of the staging table (:data:`VERSION_COLUMN`, :data:`DELETE_COLUMN`) are part of
the on-disk format (:mod:`deltasink.ops.layout`); the others live only inside one plan.
"""

from __future__ import annotations

__all__ = [
    "COALESCED_VERSION_COLUMN",
    "DELETE_COLUMN",
    "GUARD_COLUMN",
    "PREFIX",
    "RANK_COLUMN",
    "ROW_COLUMN",
    "STAGING_SUFFIX",
    "VERSION_COLUMN",
    "attribute",
    "column",
    "is_reserved",
]

#: Column-name prefix reserved for deltasink's own columns.
PREFIX = "_deltasink_"


def column(name: str) -> str:
    """The reserved column ``name`` (``column("seq") == "_deltasink_seq"``): a plan's
    working column, which no user column can be."""
    return PREFIX + name


def attribute(name: str) -> str:
    """The attribute ``name`` deltasink keeps on an object of another library (a
    delta-rs ``DeltaTable``'s cached reads), out of the way of that library's own."""
    return PREFIX + name


def is_reserved(name: str) -> bool:
    """Whether ``name`` is one of deltasink's own columns (by its prefix)."""
    return name.startswith(PREFIX)


#: Staging partition column: one partition per staged version (on-disk format).
VERSION_COLUMN = column("version")
#: Staged boolean column: the row deletes its key (``MergeSpec.delete_when``).
DELETE_COLUMN = column("delete")
#: Coalesced batches only: the sequence value a target row is compared with (see
#: :func:`deltasink.core.coalesce.coalesce`); never written to a table.
GUARD_COLUMN = column("sequence_guard")
#: A row's number in its batch, while the batch is de-duplicated or flagged.
ROW_COLUMN = column("row")
#: The version a row of a coalesced run came from.
COALESCED_VERSION_COLUMN = column("coalesced_version")
#: A row's rank among the rows of its key (the spark engine's de-duplication).
RANK_COLUMN = column("rank")
#: The default staging tables of a target live in ``<target>_deltasink_staging/``.
STAGING_SUFFIX = "_deltasink_staging"
