"""The target table, written with delta-rs: one commit per published version, the
data change and the ``txn(app_id, version)`` marker in the same commit."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError
from deltalake.schema import Schema as DeltaSchema

from deltasink import _faults
from deltasink.batch import DELETE_COLUMN, GUARD_COLUMN
from deltasink.deltalog import arrow_schema, commit_properties, post_commit_hooks, refresh
from deltasink.errors import CommitError
from deltasink.merge import SOURCE, TARGET, compile_merge, key_ranges
from deltasink.protocol import CommitResult
from deltasink.schema import align_to_target
from deltasink.spec import MergeSpec

__all__ = ["TargetTable"]

logger = logging.getLogger("deltasink")

#: Prune the MERGE by the batch's key range only if at most this share of the
#: target's files can hold a key of the batch (by their statistics).
PRUNE_WHEN_OVERLAP_AT_MOST = 0.5
#: Batches at least this large are streamed into the MERGE (the key-range predicate
#: still limits the target files read), which bounds the MERGE's memory.
STREAM_ABOVE_ROWS = 1_000_000


class TargetTable:
    """The target Delta table of a sink.

    Args:
        uri: Location of the target table.
        storage_options: delta-rs storage options.
    """

    def __init__(
        self,
        uri: str,
        *,
        storage_options: Mapping[str, str] | None = None,
        max_attempts: int = 8,
    ) -> None:
        self.uri = uri
        self.max_attempts = max_attempts
        self._options = dict(storage_options or {})
        self._table: DeltaTable | None = None

    def open(self, *, fresh: bool = True) -> DeltaTable | None:
        """The target at its latest version (``fresh=False``: as read last, for a
        caller that just refreshed it), or ``None`` if it does not exist yet."""
        if not fresh and self._table is not None:
            return self._table
        self._table = refresh(self._table, self.uri, self._options)
        return self._table

    def committed_version(self, app_id: str) -> int | None:
        """The target's ``txn`` version for ``app_id`` (``None`` if never committed)."""
        table = self.open()
        if table is None:
            return None
        version: int | None = table.transaction_version(app_id)
        return version

    def schema(self, *, fresh: bool = True) -> pa.Schema | None:
        """The target's Arrow schema, or ``None`` if it does not exist yet."""
        table = self.open(fresh=fresh)
        return None if table is None else arrow_schema(table)

    def apply(
        self,
        data: pa.Table,
        *,
        spec: MergeSpec,
        app_id: str,
        version: int,
        versions: Sequence[int] = (),
        metadata: Mapping[str, Any],
        before_attempt: Callable[[], object] | None = None,
    ) -> CommitResult:
        """Apply staged data in one Delta commit carrying ``txn(app_id, version)``.

        Idempotent: returns ``already_committed`` without writing when the target's
        marker for ``app_id`` is already ≥ ``version``. Creates the target from the
        batch when it does not exist yet. A commit that conflicts with a concurrent
        writer (Delta's optimistic concurrency) is redone on the new table state, up
        to ``max_attempts`` times with jittered backoff.

        Args:
            data: The staged rows (one version, or several coalesced).
            spec: The merge spec.
            app_id: The writer.
            version: The (highest) version applied: the marker.
            versions: Every version applied, when several were coalesced.
            metadata: Extra commit metadata.
            before_attempt: Called before each attempt (the writer's fencing check).

        Raises:
            CommitError: Conflicts persisted after ``max_attempts`` attempts.
        """
        extra = dict(metadata)
        for attempt in range(1, self.max_attempts + 1):
            if before_attempt is not None:
                before_attempt()
            try:
                result = self._apply_once(data, spec, app_id, version, extra, versions)
            except CommitFailedError as exc:
                if attempt == self.max_attempts:
                    raise CommitError(
                        f"the commit of version {version} into {self.uri} conflicted with "
                        f"concurrent writers {attempt} times in a row (last: {exc}). "
                        "Retry later (recover()), or reduce concurrent writes to the table.",
                        table=self.uri,
                        app_id=app_id,
                        version=version,
                    ) from exc
                delay = min(2.0, 0.05 * 2**attempt) * (0.5 + random.random())
                logger.info(
                    "commit of version %s into %s conflicted (%s); attempt %s/%s in %.2f s",
                    version,
                    self.uri,
                    exc,
                    attempt + 1,
                    self.max_attempts,
                    delay,
                )
                time.sleep(delay)
                continue
            if len(versions) > 1:
                result = replace(result, versions=tuple(versions))
            return result
        raise AssertionError("unreachable")

    def _apply_once(
        self,
        data: pa.Table,
        spec: MergeSpec,
        app_id: str,
        version: int,
        metadata: Mapping[str, Any],
        versions: Sequence[int],
    ) -> CommitResult:
        start = time.perf_counter()
        props = commit_properties(
            app_id=app_id, version=version, operation="commit", extra=metadata, versions=versions
        )
        table = self.open()
        if table is None:
            created = self._create(data, props, list(versions) or [version])
            if created is not None:
                return self._result(version, data, created, start, inserted=created[1])
            table = self.open()
            assert table is not None
        marker = table.transaction_version(app_id)
        if marker is not None and marker >= version:
            return CommitResult(version, "already_committed", rows=data.num_rows)
        if marker is not None and versions and marker >= versions[0]:
            # Another writer committed part of this coalesced run meanwhile: applying
            # the whole run would apply that part twice. The caller goes one by one.
            raise CommitError(
                f"the target's marker moved to {marker}, inside the coalesced versions "
                f"{list(versions)}",
                table=self.uri,
                app_id=app_id,
                version=version,
            )
        flag = data.column(DELETE_COLUMN) if DELETE_COLUMN in data.column_names else None
        guard = data.column(GUARD_COLUMN) if GUARD_COLUMN in data.column_names else None
        values = data.drop_columns(
            [c for c in (DELETE_COLUMN, GUARD_COLUMN) if c in data.column_names]
        )
        values = align_to_target(
            values,
            arrow_schema(table),
            evolve=spec.schema_evolution,
            table=self.uri,
            non_null_mask=None if flag is None else pc.invert(flag),
        )
        before = table.version()
        _faults.point("publish.before_target_commit", versions=list(versions) or [version])
        metrics: dict[str, Any] = {}
        if spec.mode == "append":
            metrics["num_target_rows_inserted"] = self._append(table, values, spec, props)
        elif (overlap := self._overlap(table, values, spec)) == 0.0:
            # Insert-only fast path: no key of the batch can exist in the target, so
            # the MERGE would only insert. Deletes of absent keys are no-ops.
            # The append is blind (Delta checks it against nothing), so it must land on
            # exactly the snapshot whose statistics proved the keys absent: no commit
            # retries; a concurrent commit fails it and the next attempt decides anew.
            rows = values if flag is None else values.filter(pc.invert(flag))
            metrics["num_target_rows_inserted"] = self._append(
                table, rows, spec, props, max_commit_retries=0
            )
        else:
            source = values if flag is None else values.append_column(DELETE_COLUMN, flag)
            if guard is not None:
                source = source.append_column(GUARD_COLUMN, guard)
            # Pruning pays when the batch's key range misses most of the target's files;
            # when it touches most of them, the plain streamed MERGE is cheaper.
            prune = overlap is None or overlap <= PRUNE_WHEN_OVERLAP_AT_MOST
            plan = compile_merge(
                spec,
                values.column_names,
                has_delete=flag is not None,
                prune=key_ranges(values, spec.keys) if prune else None,
                has_guard=guard is not None,
            )
            merger = table.merge(
                source,
                plan.on,
                source_alias=SOURCE,
                target_alias=TARGET,
                merge_schema=spec.schema_evolution,
                # A non-streamed source lets delta-rs prune target files, but it holds
                # the whole source in the join: large batches stream instead (memory).
                streamed_exec=not prune or values.num_rows >= STREAM_ABOVE_ROWS,
                commit_properties=props,
                post_commithook_properties=post_commit_hooks(table),
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
                post_commithook_properties=post_commit_hooks(table),
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

    @staticmethod
    def _append(
        table: DeltaTable,
        values: pa.Table,
        spec: MergeSpec,
        props: CommitProperties,
        *,
        max_commit_retries: int | None = None,
    ) -> int:
        """Append ``values`` (absent nullable columns filled with nulls, as Delta does).

        ``max_commit_retries=0`` makes the append fail, rather than land on a newer
        snapshot, when anyone committed since ``table`` was read."""
        if max_commit_retries is not None:
            props = CommitProperties(
                custom_metadata=props.custom_metadata,
                app_transactions=props.app_transactions,
                max_commit_retries=max_commit_retries,
            )
        for column in arrow_schema(table):
            if column.name not in values.column_names:
                values = values.append_column(column.name, pa.nulls(values.num_rows, column.type))
        if values.num_rows:
            write_deltalake(
                table,
                values,
                mode="append",
                schema_mode="merge" if spec.schema_evolution else None,
                commit_properties=props,
                post_commithook_properties=post_commit_hooks(table),
            )
        return values.num_rows

    @staticmethod
    def _overlap(table: DeltaTable, values: pa.Table, spec: MergeSpec) -> float | None:
        """The share of the target's files whose key statistics overlap the batch's key
        range: 0.0 proves that no key of the batch exists in the target.

        ``None`` when the statistics cannot prove it exactly: several keys; a key type
        whose statistics are not exact bounds (strings and binary may be truncated
        prefixes, floats ignore NaN and order -0.0 with 0.0, decimals and booleans are
        left to the MERGE); files without statistics for the key. Integers and dates
        are exact; timestamps are stored to the microsecond but their statistics are
        truncated to the millisecond, so each file's range is widened by 1 ms.
        """
        if len(spec.keys) != 1 or values.num_rows == 0:
            return None
        key = spec.keys[0]
        column = values.column(key)
        kind = column.type
        if not (pa.types.is_integer(kind) or pa.types.is_date(kind) or pa.types.is_timestamp(kind)):
            return None
        actions = pa.table(table.get_add_actions(flatten=True))
        if actions.num_rows == 0:
            return 0.0
        names = (f"min.{key}", f"max.{key}")
        if any(n not in actions.column_names for n in names):
            return None
        mins, maxs = actions.column(names[0]), actions.column(names[1])
        if mins.null_count or maxs.null_count:
            return None
        bounds = pc.min_max(column)
        low, high = bounds["min"], bounds["max"]
        try:
            mins, maxs = mins.cast(kind), maxs.cast(kind)
            if pa.types.is_timestamp(kind):
                slack: Any = pa.scalar(1_000, pa.duration("us")).cast(pa.duration(kind.unit))
                mins = pc.subtract_checked(mins, slack)
                maxs = pc.add_checked(maxs, slack)
            overlap = pc.and_(pc.less_equal(mins, high), pc.greater_equal(maxs, low))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
        return float(pc.sum(overlap.cast(pa.int64())).as_py() or 0) / actions.num_rows

    def _create(
        self, data: pa.Table, props: CommitProperties, versions: list[int]
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
            write_deltalake(
                self.uri, rows, mode="error", commit_properties=once, storage_options=self._options
            )
        except CommitFailedError:
            return None
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
