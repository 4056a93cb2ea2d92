"""Creating the target from a version's rows, when it does not exist yet (the first
commit of a :class:`~.publish.TargetWriter`, carrying the marker like any other)."""

from __future__ import annotations

from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError

from deltasink import _faults
from deltasink.input.sql import DELETE_COLUMN, GUARD_COLUMN
from deltasink.shapes.partitions import blank_as_null, string_partitions
from deltasink.shapes.table import TableSpec


class _Target(Protocol):
    uri: str
    table_spec: TableSpec | None

    @property
    def storage_options(self) -> dict[str, str]: ...

    def open(self, *, fresh: bool = True) -> DeltaTable | None: ...


__all__ = ["create_target"]


def create_target(
    writer: _Target, data: pa.Table, props: CommitProperties, versions: list[int]
) -> tuple[int, int] | None:
    """Create the target from the batch's inserted rows; ``None`` if another writer
    created it first (the caller then merges)."""
    rows = data.drop_columns([GUARD_COLUMN]) if GUARD_COLUMN in data.column_names else data
    if DELETE_COLUMN in rows.column_names:
        rows = rows.filter(pc.invert(rows.column(DELETE_COLUMN))).drop_columns([DELETE_COLUMN])
    _faults.point("publish.before_target_commit", versions=versions)
    # Two writers creating the target at once would both land (the second as
    # version 1, with the same keys): no commit retries, the loser merges instead.
    once = CommitProperties(
        custom_metadata=props.custom_metadata,
        app_transactions=props.app_transactions,
        max_commit_retries=0,
    )
    try:
        spec = writer.table_spec
        if spec is not None and spec.partition_by:  # '' is null there (the protocol)
            rows = blank_as_null(rows, string_partitions(rows.schema, spec.partition_by))
        write_deltalake(
            writer.uri,
            rows,
            mode="error",
            partition_by=list(spec.partition_by) if spec and spec.partition_by else None,
            configuration=dict(spec.properties) if spec and spec.properties else None,
            description=spec.comment if spec else None,
            commit_properties=once,
            storage_options=writer.storage_options,
        )
    except CommitFailedError:
        return None
    except DeltaError:
        if writer.open() is not None:  # created by another writer meanwhile
            return None
        raise
    table = writer.open()
    assert table is not None
    _faults.point("publish.after_target_commit")
    return table.version(), rows.num_rows
