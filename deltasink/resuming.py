"""A stream's batches mapped to versions by their origins: ``DeltaSink.foreach_batch``
(:class:`StreamWriting`, a base of :class:`~deltasink.sink.DeltaSink`), what the
writer's versions recorded (:class:`StreamOrigins`, read from both Delta logs and
remembered between batches), the rule applied to a micro-batch
(:mod:`deltasink.ops.placing`), and where a new query resumes (``DeltaSink.offsets``)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from deltasink.core.committables import CommitReport, LogState, Placement
from deltasink.errors import CheckpointResetError, ConfigurationError
from deltasink.failures import named_storage_errors
from deltasink.input.files import empty_like, file_rows, row_count
from deltasink.inputs import Batch
from deltasink.observe import observed
from deltasink.ops.checkpoint import row_files_needed, stream_origin, with_row_files
from deltasink.ops.history import HistoryEntry
from deltasink.ops.origin import (
    BatchOrigin,
    batch_files,
    decode,
    encode,
    held_files,
    normal_path,
    origin_for,
)
from deltasink.ops.placing import Decision, Held, resolve
from deltasink.ops.resume import ResumePoint, resume_point

__all__ = ["StreamOrigins", "StreamWriting", "no_foreach_batch_on_the_embedded_session"]

logger = logging.getLogger("deltasink")


class StreamOrigins:
    """The origins one writer's versions recorded: its target commits' (read through
    ``history``) and its pending versions' stage commits' (``staged_origin``).

    Committed versions never change, so what was read of them is remembered for the
    life of the sink; pending ones are read each time (an operator may abort them).

    Args:
        target: The target (for messages).
        app_id: The writer (for messages).
        history: The writer's target commits, newest first, at most ``limit`` of them
            (``None``: all), as :meth:`~deltasink.DeltaSink.history` returns them.
        staged_origin: The encoded origin a pending version's stage commit recorded.
    """

    def __init__(
        self,
        *,
        target: str,
        app_id: str,
        history: Callable[[int | None], list[HistoryEntry]],
        staged_origin: Callable[[int], str | None],
    ) -> None:
        self.target = target
        self.app_id = app_id
        self._history = history
        self._staged_origin = staged_origin
        # Committed version -> the origin recorded for it (None: none), as read or written.
        self._known: dict[int, BatchOrigin | None] = {}
        self._recorded = False  # some committed version recorded an origin
        self._unrecorded: int | None = None  # none recorded through this committed version
        # The files the committed versions delivered (normalized), through a version.
        self._files: tuple[int, set[str]] | None = None

    # -- what the writer holds -------------------------------------------------------

    def held(self, state: LogState) -> Held:
        """What the writer holds, for :func:`~deltasink.ops.placing.resolve`."""
        committed = state.committed_version
        pending = tuple(s.version for s in state.pending)
        last = pending[-1] if pending else committed
        last_origin = None if last is None else self.origin_at(last, committed)
        recorded = last_origin is not None or self._any_recorded(state)
        return Held(
            committed,
            pending,
            last_origin,
            recorded,
            lambda version: self.origin_at(version, committed),
        )

    def origin_at(self, version: int, committed: int | None) -> BatchOrigin | None:
        """The origin recorded for a version the writer holds (``None``: none)."""
        if committed is None or version > committed:
            return decode(self._staged_origin(version))
        if version in self._known:
            return self._known[version]
        for limit in (64, None):
            entries = self._history(limit)
            self._learn(entries)
            if version in self._known or (entries and entries[-1].version < version):
                break
        # Not on record (an expired log, a marker without a commit of ours): none.
        return self._known.setdefault(version, None)

    def _learn(self, entries: list[HistoryEntry]) -> None:
        for entry in entries:
            for version in entry.versions:
                self._known.setdefault(
                    version, origin_for(entry.origin, version, last=entry.version)
                )
            self._recorded = self._recorded or entry.origin is not None

    def _any_recorded(self, state: LogState) -> bool:
        """Whether any version held recorded an origin (else the legacy rule applies)."""
        committed = state.committed_version
        if not self._recorded and committed is not None and self._unrecorded != committed:
            self._learn(self._history(None))
            self._unrecorded = None if self._recorded else committed
        return self._recorded or any(
            self._staged_origin(s.version) is not None for s in state.pending
        )

    def files_held(self, state: LogState) -> set[str]:
        """Every file (normalized) a file source delivered to a version the writer
        holds: committed ones (remembered, read incrementally) and pending ones."""
        committed = state.committed_version
        files: set[str] = set()
        if committed is not None:
            if self._files is None or self._files[0] > committed:
                entries = self._history(None)
                self._learn(entries)
                files = held_files(e.origin for e in entries if e.origin is not None)
            else:
                through, files = self._files
                if through < committed:
                    for limit in (16, 256, None):
                        entries = self._history(limit)
                        if limit is None or (entries and entries[-1].version <= through):
                            break
                    self._learn(entries)
                    newer = [e.origin for e in entries if e.version > through and e.origin]
                    files = files | held_files(newer)
            self._files = (committed, files)
        pending = [decode(self._staged_origin(s.version)) for s in state.pending]
        return files | held_files(o for o in pending if o is not None)

    def written(self, decision: Decision | None, report: CommitReport) -> None:
        """After a write: remember the origin of the version just committed."""
        if decision is not None and report.committed_version == decision.version:
            self._known[decision.version] = decision.origin
            self._recorded = True

    # -- placing a micro-batch ---------------------------------------------------------

    def placer(
        self, df: Any, origin: BatchOrigin, *, resume: bool, decided: list[Decision]
    ) -> Callable[[LogState], Placement]:
        """For the core's ``write``: where micro-batch ``df`` of ``origin`` goes, given
        the state it read (appended to ``decided`` too)."""

        def place(state: LogState) -> Placement:
            decision = resolve(
                origin, self.held(state), resume=resume, app_id=self.app_id, table=self.target
            )
            decided.append(decision)
            batch = df
            if decision.leave_out_held and row_files_needed(decision.origin):
                raise self._files_unknown(decision.origin)
            if decision.leave_out_held and batch_files(decision.origin):
                batch = self._leave_out(df, decision.origin, self.files_held(state))
            return Placement(decision.version, encode(decision.origin), batch, decision.replay)

        return place

    def _files_unknown(self, origin: BatchOrigin) -> CheckpointResetError:
        """Resuming an Auto Loader stream whose micro-batch does not say its files."""
        return CheckpointResetError(
            f"micro-batch {origin.batch_id} of streaming query {origin.query_id} resumes "
            f"app {self.app_id!r} on {self.target} from Auto Loader, whose checkpoint does "
            "not list its files, and its rows do not say which file they came from (no "
            "_metadata.file_path; input_file_name() unavailable), so the rows of files the "
            "target already holds cannot be left out. Nothing was written. Select the "
            'file metadata in the stream (.select("*", "_metadata")) and run it again.',
            query_id=origin.query_id,
            table=self.target,
            app_id=self.app_id,
            version=origin.batch_id,
        )

    def _leave_out(self, df: Any, origin: BatchOrigin, held: set[str]) -> Any:
        """``df`` without the rows of the files the writer holds (counted and logged).

        Raises:
            CheckpointResetError: Some of the batch's files are held, others not, and its
                rows cannot be told apart by file.
        """
        files = {normal_path(f) for f in batch_files(origin)}
        again = files & held
        if not again:
            return df
        shown = ", ".join(sorted(again)[:3]) + (
            f" and {len(again) - 3} more" if len(again) > 3 else ""
        )
        if again == files:
            batch, rows = row_count(df)
            batch = empty_like(batch)
        else:
            split = file_rows(df)
            if split is None:
                raise CheckpointResetError(
                    f"micro-batch {origin.batch_id} of streaming query {origin.query_id} "
                    f"reads files app {self.app_id!r} already holds on {self.target} "
                    f"({shown}) beside new ones, and its rows do not say which file they "
                    "came from (no _metadata.file_path; input_file_name() unavailable or "
                    "empty), so the held rows cannot be left out. Nothing was written. "
                    'Select the file metadata in the stream (.select("*", "_metadata")), '
                    "or move the held files out of the input (`deltasink offsets "
                    f"{self.target} --app {self.app_id} --json` lists them).",
                    query_id=origin.query_id,
                    table=self.target,
                    app_id=self.app_id,
                    version=origin.batch_id,
                )
            drop = {raw for raw in split.counts if normal_path(raw) in held}
            rows = sum(split.counts[raw] for raw in drop)
            batch = split.without(drop)
        logger.info(
            "app %r: micro-batch %s of streaming query %s resumed after the target: left "
            "out %d row(s) of %d file(s) the target already holds (%s)",
            self.app_id,
            origin.batch_id,
            origin.query_id,
            rows,
            len(again),
            shown,
        )
        return batch

    # -- resuming ----------------------------------------------------------------------

    def resume_point(self, state: LogState) -> ResumePoint:
        """Where a new query continues right after the newest version held (see
        :meth:`~deltasink.DeltaSink.offsets`)."""
        committed = state.committed_version
        pending = tuple(s.version for s in state.pending)
        staged = [
            o for s in reversed(state.pending) if (o := decode(self._staged_origin(s.version)))
        ]
        entries = self._history(None) if committed is not None else []
        self._learn(entries)
        target_version = next((e.target_version for e in entries if e.version == committed), None)
        last = pending[-1] if pending else committed
        own = None if last is None else self.origin_at(last, committed)
        recorded = staged + [e.origin for e in entries if e.origin is not None]
        if own is not None:
            return resume_point(
                committed, target_version, own, recorded, pending=pending, exact=True
            )
        newest = next((o for o in recorded if o.query_id is not None or o.sources), None)
        return resume_point(
            committed, target_version, newest, recorded, pending=pending, exact=newest is None
        )


class StreamWriting:
    """``foreach_batch``, the streaming entry of :class:`~deltasink.sink.DeltaSink`
    (whose attributes and ``_write`` these are)."""

    target: str
    app_id: str
    _origins: StreamOrigins

    def _write(
        self,
        df: Batch,
        version: int,
        *,
        replays_last_only: bool,
        origin: str | None = None,
        place: Callable[[LogState], Placement] | None = None,
    ) -> CommitReport:
        raise NotImplementedError

    @observed("foreach_batch")
    @named_storage_errors
    def foreach_batch(
        self,
        df: Batch,
        batch_id: int,
        *,
        resume: bool = False,
        checkpoint: str | os.PathLike[str] | None = None,
    ) -> CommitReport:
        """``writeStream.foreachBatch(sink.foreach_batch)``: micro-batch ``batch_id``
        of one streaming query, written exactly once.

        :meth:`write` with Spark's replay rule, from one read of the Delta logs; returns
        its report (Spark ignores it; a wrapping function can log it).

        A stream is an identity, not a counter: the target commit of each batch records
        its *origin* (:mod:`deltasink.ops.origin`): the query's stable id (the one in
        ``<checkpointLocation>/metadata``), the batch id and the source positions Spark
        wrote to ``<checkpointLocation>/offsets/<batch_id>`` (with a file source's
        files). The version is ``base + batch_id``. One rule places every micro-batch
        (:mod:`deltasink.ops.placing`), from the *newest version the writer holds*
        (committed or pending):

        * written by this query: the next batch is written; a replay (this very batch,
          same positions) is a silent no-op, a pending one is published; a batch that
          maps to a version held but is not that batch (a checkpoint restored from an
          older copy that re-planned it, changed offsets) is
          :class:`~deltasink.errors.ReplayMismatchError`, nothing written;
        * written by anything else, another query (a deleted, reset or changed
          checkpoint) or a batch job (``write()``, ``pre_commit()``, with or without a
          position): :class:`~deltasink.errors.CheckpointResetError`, nothing written.
          So a stream and batch jobs on one ``app_id`` stop the stream at its next batch
          after a batch job's version: give them separate app ids, or resume;
        * no version records an origin (a target older than origins): the batch id is
          the version, as before.

        ``resume=True`` is the way out of both refusals: the batch becomes the version
        right after the newest one held (pending versions are published first, in this
        call) and that base is recorded, so the query's restarts map their batches the
        same way with or without ``resume``. A file source's rows of files the writer
        already holds are left out, counted and logged (by ``_metadata.file_path`` or
        ``input_file_name()``: :mod:`deltasink.input.files`), for this batch and the
        query's later ones. Other sources must start where ``deltasink offsets`` says.

        The query is identified from ``checkpoint`` when given, else from a classic
        session (the local property ``sql.streaming.queryId``, the checkpoint through
        the driver's running query). Without an identity (Spark Connect without
        ``checkpoint``, a ``pyarrow.Table``) nothing is recorded and ``batch_id`` is the
        version, as before origins existed.

        Args:
            df: The micro-batch.
            batch_id: Spark's batch id.
            resume: Continue right after the newest version held when this query did
                not write it, or when a batch of it does not replay its version (above).
            checkpoint: The query's ``checkpointLocation`` (needed on Spark Connect and
                serverless to know the query and its positions).

        Raises:
            CheckpointResetError: The newest version held was not written by this query;
                or, resuming, the batch mixes held and new files and its rows cannot be
                told apart by file.
            ReplayMismatchError: The batch maps to a version held that does not record
                it with these positions.
            InvalidVersionError: Without origins, ``batch_id`` is below the committed
                version.
            ConfigurationError: ``checkpoint`` holds no offsets for ``batch_id``, or
                ``resume`` without a way to identify the query.
            As :meth:`write` otherwise.
        """
        origin = stream_origin(
            df, batch_id, checkpoint=None if checkpoint is None else os.fspath(checkpoint)
        )
        if origin is None:
            if resume:
                raise ConfigurationError(
                    "resume=True needs the streaming query's identity: pass "
                    "checkpoint=<the query's checkpointLocation> (Spark Connect and "
                    "serverless do not expose it to foreachBatch).",
                    table=self.target,
                    app_id=self.app_id,
                )
            return self._write(df, batch_id, replays_last_only=True)
        if row_files_needed(origin):  # Auto Loader: its files are in the rows only
            split = file_rows(df)
            if split is not None:
                df, origin = split.batch, with_row_files(origin, list(split.counts))
        decided: list[Decision] = []
        place = self._origins.placer(df, origin, resume=resume, decided=decided)
        report = self._write(df, batch_id, replays_last_only=True, place=place)
        self._origins.written(decided[-1] if decided else None, report)
        return report


def no_foreach_batch_on_the_embedded_session(target: str, app_id: str) -> ConfigurationError:
    """The refusal of a ``foreachBatch`` writer on the embedded session (here, not in
    :mod:`deltasink.streaming`, which imports the sink that raises it too)."""
    return ConfigurationError(
        "the embedded session (embedded_spark(), Sail) has no foreachBatch, so a streaming "
        "query cannot call this writer. Run the query on a classic Spark session "
        "(SparkSession.builder.master('local[*]').getOrCreate(), which needs Java 17; "
        "deltasink then commits with delta-rs, or with Spark where delta-spark is "
        "configured), on Databricks, or on a Spark Connect server of Spark itself. On the "
        "embedded session, write each batch with DeltaSink.write(df, version) instead.",
        table=target,
        app_id=app_id,
    )
