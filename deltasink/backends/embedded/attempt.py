"""The steps of one attempt of a target commit on delta-rs, after the target was read
(:meth:`.publish.TargetWriter._apply_once`): whether the markers already cover it
(:func:`covered`), the batch shaped for its mode (:func:`mode_batch`), and the write
(:func:`write`: the mode's, then the marker alone when delta-rs made no commit)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable
from deltalake.schema import Schema as DeltaSchema

from deltasink.backends.deltalog.commits import post_commit_hooks
from deltasink.backends.deltalog.tables import arrow_schema, txn_version
from deltasink.errors import CommitError
from deltasink.input.sql import DELETE_COLUMN, GUARD_COLUMN
from deltasink.shapes.partitions import string_partitions
from deltasink.shapes.schema import align_to_target
from deltasink.shapes.spec import MergeSpec

from .grouping import StaleGroup
from .modes import WRITE_MODE, ModeBatch

__all__ = ["covered", "mode_batch", "write"]


def covered(
    table: DeltaTable,
    uri: str,
    app_id: str,
    version: int,
    versions: Sequence[int],
    markers: Mapping[str, int] | None,
) -> bool:
    """Whether the marker of ``app_id`` in ``table`` covers ``version`` (already
    committed: nothing to write).

    Raises:
        StaleGroup: One of a group commit's carried ``markers`` (app id -> version) is in
            the target already (the group then leaves it out).
        CommitError: The marker moved inside the coalesced ``versions``: another writer
            committed part of the run, which applied whole would apply that part twice
            (the caller goes one by one).
    """
    marker = txn_version(table, app_id)
    if marker is not None and marker >= version:
        return True
    carried = {a: m for a in markers or {} if (m := txn_version(table, a)) is not None}
    if any(carried[a] >= v for a, v in (markers or {}).items() if a in carried):
        raise StaleGroup(f"a carried version is in {uri} already: {carried}")
    if marker is not None and versions and marker >= versions[0]:
        raise CommitError(
            f"the target's marker moved to {marker}, inside the coalesced versions "
            f"{list(versions)}",
            table=uri,
            app_id=app_id,
            version=version,
        )
    return False


def mode_batch(
    table: DeltaTable,
    data: pa.Table,
    spec: MergeSpec,
    props: CommitProperties,
    uri: str,
    before_rewrite: Callable[[DeltaTable], None],
) -> ModeBatch:
    """``data`` as its mode writes it into ``table``: the ``delete_when`` flag and the
    sequence guard split off, the values aligned to the target's schema (evolving it
    when the spec says so), the string partition columns whose ``''`` is null, and
    ``before_rewrite`` (the INT96 refusal, :class:`~.timestamps.Int96Guard`).

    Raises:
        SchemaMismatchError: The values do not fit the target
            (:func:`~deltasink.shapes.schema.align_to_target`).
    """
    flag = data.column(DELETE_COLUMN) if DELETE_COLUMN in data.column_names else None
    guard = data.column(GUARD_COLUMN) if GUARD_COLUMN in data.column_names else None
    values = data.drop_columns([c for c in (DELETE_COLUMN, GUARD_COLUMN) if c in data.column_names])
    values = align_to_target(
        values,
        arrow_schema(table),
        evolve=spec.schema_evolution,
        table=uri,
        non_null_mask=None if flag is None else pc.invert(flag),
    )
    blank = string_partitions(arrow_schema(table), table.metadata().partition_columns)
    return ModeBatch(table, values, flag, guard, spec, props, uri, blank, before_rewrite)


def write(batch: ModeBatch, before: int) -> dict[str, Any]:
    """``batch`` written by its mode (:data:`~.modes.WRITE_MODE`) into its table, read
    at version ``before``; when delta-rs made no commit (an empty batch, or only older
    ``sequence_by`` rows), the marker committed alone so the version counts. Returns
    delta-rs's metrics."""
    table = batch.table
    metrics = WRITE_MODE[batch.spec.mode](batch)
    if table.version() == before:
        # delta-rs makes no commit when nothing changed (an empty batch, or only
        # older sequence_by rows): commit the marker alone so the version counts.
        table.create_write_transaction(
            [],
            mode="append",
            schema=DeltaSchema.from_arrow(arrow_schema(table)),
            commit_properties=batch.props,
            post_commithook_properties=post_commit_hooks(table),
        )
        table.update_incremental()
    return metrics
