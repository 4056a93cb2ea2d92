"""The target table, written with delta-rs: one commit per published version, the
data change and the ``txn(app_id, version)`` marker in the same commit."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import DeltaError
from deltalake.schema import Schema as DeltaSchema

from deltasink import _faults
from deltasink.batch import DELETE_COLUMN
from deltasink.deltalog import arrow_schema, commit_properties, open_table
from deltasink.merge import SOURCE, TARGET, compile_merge
from deltasink.protocol import CommitResult
from deltasink.schema import align_to_target
from deltasink.spec import MergeSpec

__all__ = ["TargetTable"]


class TargetTable:
    """The target Delta table of a sink.

    Args:
        uri: Location of the target table.
        storage_options: delta-rs storage options.
    """

    def __init__(self, uri: str, *, storage_options: Mapping[str, str] | None = None) -> None:
        self.uri = uri
        self._options = dict(storage_options or {})
        self._table: DeltaTable | None = None

    def open(self) -> DeltaTable | None:
        """The target at its latest version, or ``None`` if it does not exist yet."""
        if self._table is None:
            self._table = open_table(self.uri, self._options)
        else:
            self._table.update_incremental()
        return self._table

    def committed_version(self, app_id: str) -> int | None:
        """The target's ``txn`` version for ``app_id`` (``None`` if never committed)."""
        table = self.open()
        if table is None:
            return None
        version: int | None = table.transaction_version(app_id)
        return version

    def schema(self) -> pa.Schema | None:
        """The target's Arrow schema, or ``None`` if it does not exist yet."""
        table = self.open()
        return None if table is None else arrow_schema(table)

    def apply(
        self,
        data: pa.Table,
        *,
        spec: MergeSpec,
        app_id: str,
        version: int,
        metadata: Mapping[str, Any],
    ) -> CommitResult:
        """Apply one staged version in one Delta commit carrying ``txn(app_id, version)``.

        Idempotent: returns ``already_committed`` without writing when the target's
        marker for ``app_id`` is already ≥ ``version``. Creates the target from the
        batch when it does not exist yet.
        """
        start = time.perf_counter()
        props = commit_properties(
            app_id=app_id, version=version, operation="commit", extra=metadata
        )
        table = self.open()
        if table is None:
            created = self._create(data, props)
            if created is not None:
                return self._result(version, data, created, start, inserted=created[1])
            table = self.open()
            assert table is not None
        marker = table.transaction_version(app_id)
        if marker is not None and marker >= version:
            return CommitResult(version, "already_committed", rows=data.num_rows)
        flag = data.column(DELETE_COLUMN) if DELETE_COLUMN in data.column_names else None
        values = data.drop_columns([DELETE_COLUMN]) if flag is not None else data
        values = align_to_target(
            values,
            arrow_schema(table),
            evolve=spec.schema_evolution,
            table=self.uri,
            non_null_mask=None if flag is None else pc.invert(flag),
        )
        before = table.version()
        metrics: dict[str, Any] = {}
        if spec.mode == "append":
            for column in arrow_schema(table):  # Delta fills absent nullable columns
                if column.name not in values.column_names:
                    values = values.append_column(
                        column.name, pa.nulls(values.num_rows, column.type)
                    )
            if values.num_rows:
                write_deltalake(
                    table,
                    values,
                    mode="append",
                    schema_mode="merge" if spec.schema_evolution else None,
                    commit_properties=props,
                )
            metrics["num_target_rows_inserted"] = values.num_rows
        else:
            source = values if flag is None else values.append_column(DELETE_COLUMN, flag)
            plan = compile_merge(spec, values.column_names, has_delete=flag is not None)
            merger = table.merge(
                source,
                plan.on,
                source_alias=SOURCE,
                target_alias=TARGET,
                merge_schema=spec.schema_evolution,
                commit_properties=props,
            )
            metrics = plan.apply_to(merger).execute()
        if table.version() == before:
            # delta-rs makes no commit when nothing changed (an empty batch, or only
            # older sequence_by rows): commit the marker alone so the version counts.
            table.create_write_transaction(
                [],
                mode="append",
                schema=DeltaSchema.from_arrow(arrow_schema(table)),
                commit_properties=props,
            )
            table.update_incremental()
        _faults.point("publish.after_target_commit")
        return CommitResult(
            version,
            "committed",
            rows=data.num_rows,
            target_version=table.version(),
            rows_inserted=int(metrics.get("num_target_rows_inserted", 0)),
            rows_updated=int(metrics.get("num_target_rows_updated", 0)),
            rows_deleted=int(metrics.get("num_target_rows_deleted", 0)),
            duration_s=time.perf_counter() - start,
        )

    def _create(self, data: pa.Table, props: Any) -> tuple[int, int] | None:
        """Create the target from the batch's inserted rows; ``None`` if another writer
        created it first (the caller then merges)."""
        rows = data
        if DELETE_COLUMN in data.column_names:
            rows = data.filter(pc.invert(data.column(DELETE_COLUMN))).drop_columns([DELETE_COLUMN])
        try:
            write_deltalake(
                self.uri, rows, mode="error", commit_properties=props, storage_options=self._options
            )
        except DeltaError as exc:
            if "already exists" in str(exc):
                return None
            raise
        table = self.open()
        assert table is not None
        _faults.point("publish.after_target_commit")
        return table.version(), rows.num_rows

    @staticmethod
    def _result(
        version: int, data: pa.Table, created: tuple[int, int], start: float, *, inserted: int
    ) -> CommitResult:
        return CommitResult(
            version,
            "committed",
            rows=data.num_rows,
            target_version=created[0],
            rows_inserted=inserted,
            rows_updated=0,
            rows_deleted=0,
            duration_s=time.perf_counter() - start,
        )
