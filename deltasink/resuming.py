"""A stream's batches mapped to versions by their origins: ``DeltaSink.foreach_batch``
(:class:`StreamWriting`, a base of :class:`~deltasink.sink.DeltaSink`), the origin the
committed version recorded (remembered between batches), the replay rule applied to a
micro-batch, and where a new query resumes (``DeltaSink.offsets``)."""

from __future__ import annotations

import os
from collections.abc import Callable

from deltasink.core.committables import CommitReport
from deltasink.errors import ConfigurationError
from deltasink.failures import named_storage_errors
from deltasink.inputs import Batch
from deltasink.observe import observed
from deltasink.ops.checkpoint import ResumePoint, resume_point, stream_origin
from deltasink.ops.history import HistoryEntry
from deltasink.ops.origin import BatchOrigin, batch_files, check_resume_start, encode, resolve

__all__ = ["StreamOrigins", "StreamWriting", "no_foreach_batch_on_the_embedded_session"]


class StreamOrigins:
    """The origins one writer's target commits recorded, read through ``history``.

    Args:
        target: The target (for messages).
        app_id: The writer (for messages).
        history: The writer's target commits, newest first, at most ``limit`` of them
            (``None``: all), as :meth:`~deltasink.DeltaSink.history` returns them.
    """

    def __init__(
        self, *, target: str, app_id: str, history: Callable[[int | None], list[HistoryEntry]]
    ) -> None:
        self.target = target
        self.app_id = app_id
        self._history = history
        # The origin of the newest origin-recording commit this sink made or read:
        # (committed version it was read at, origin); saves a history read per batch.
        self._seen: tuple[int, BatchOrigin | None] | None = None

    def version_of(
        self, origin: BatchOrigin, *, resume: bool, chosen: list[tuple[int, BatchOrigin]]
    ) -> Callable[[int | None], tuple[int, str | None]]:
        """For the core's ``write``: the version of the micro-batch ``origin`` given the
        committed version, and its origin to record (appended to ``chosen`` too)."""

        def version_of(committed: int | None) -> tuple[int, str | None]:
            seen = self.committed_origin(committed)
            version, recorded = resolve(
                origin,
                committed=committed,
                committed_origin=seen,
                resume=resume,
                app_id=self.app_id,
                table=self.target,
            )
            if (
                committed is not None
                and batch_files(origin)
                and (seen is None or seen.query_id != origin.query_id)
            ):
                # Resuming (or a stream taking over a legacy target): never re-read a
                # file the target holds.
                check_resume_start(
                    origin,
                    self.committed_files(),
                    committed=committed,
                    app_id=self.app_id,
                    table=self.target,
                )
            chosen.append((version, recorded))
            return version, encode(recorded)

        return version_of

    def written(self, committed: int | None, chosen: list[tuple[int, BatchOrigin]]) -> None:
        """After the write: remember the origin just committed, if it was."""
        if chosen and committed == chosen[0][0]:
            self._seen = chosen[0]

    def committed_files(self) -> set[str]:
        """Every file a file source delivered to this writer's committed versions."""
        return {
            f for e in self._history(None) if e.origin is not None for f in batch_files(e.origin)
        }

    def committed_origin(self, committed: int | None) -> BatchOrigin | None:
        """The origin recorded by the newest of this writer's target commits that
        recorded one (versions ``recover()`` published record none); ``None`` if none
        did. Remembered between calls while the committed version stays."""
        if committed is None:
            return None
        seen = self._seen
        if seen is not None and seen[0] == committed:
            return seen[1]
        found: BatchOrigin | None = None
        for limit in (64, None):
            entries = self._history(limit)
            found = next((e.origin for e in entries if e.origin is not None), None)
            if found is not None or limit is None or len(entries) == 0:
                break
        self._seen = (committed, found)
        return found

    def resume_point(self, committed: int | None) -> ResumePoint:
        """Where a new query continues right after ``committed`` (see
        :meth:`~deltasink.DeltaSink.offsets`)."""
        entries = self._history(None)
        origins = [e for e in entries if e.origin is not None]
        if committed is None or not origins:
            return resume_point(committed, None, None)
        last = origins[0]
        point = resume_point(
            committed,
            last.target_version,
            last.origin,
            [e.origin for e in origins[1:] if e.origin is not None],
        )
        if last.version != committed:
            return ResumePoint(
                point.version, point.target_version, point.origin, point.starting, exact=False
            )
        return point


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
        version_of: Callable[[int | None], tuple[int, str | None]] | None = None,
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
        wrote to ``<checkpointLocation>/offsets/<batch_id>``. The version is ``base +
        batch_id``, ``base`` being 0 unless the query resumed after another one.

        * A batch of the query that committed the current version: Spark replays only
          its last batch, so the same batch again is a silent no-op (provided it covers
          the same source positions, else :class:`~deltasink.errors.ReplayMismatchError`),
          and a lower one is :class:`~deltasink.errors.InvalidVersionError`.
        * A batch of another query (the checkpoint was deleted, reset or changed; a
          new one restarts batch ids at 0): :class:`~deltasink.errors.CheckpointResetError`,
          nothing written, unless ``resume``: the batch becomes the version right after
          the committed one, and that base is recorded, so a restart of the resumed
          query maps its batches the same way. Start such a query from the positions
          :meth:`offsets` gives, or its rows are read again.

        The query is identified from ``checkpoint`` when given, else from a classic
        session (the local property ``sql.streaming.queryId``, the checkpoint through
        the driver's running query). Without an identity (Spark Connect without
        ``checkpoint``, a ``pyarrow.Table``) nothing is recorded and ``batch_id`` is the
        version, as before origins existed; likewise after versions committed by a
        writer that recorded no query (old versions, ``recover()``, batch jobs).

        Args:
            df: The micro-batch.
            batch_id: Spark's batch id.
            resume: Continue right after the committed version when the current version
                was committed by another query (see above).
            checkpoint: The query's ``checkpointLocation`` (needed on Spark Connect and
                serverless to know the query and its positions).

        Raises:
            CheckpointResetError: Another query committed the current version.
            ReplayMismatchError: A replay of the committed batch with other positions.
            InvalidVersionError: ``batch_id`` maps below the committed version.
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
        chosen: list[tuple[int, BatchOrigin]] = []
        version_of = self._origins.version_of(origin, resume=resume, chosen=chosen)
        report = self._write(df, batch_id, replays_last_only=True, version_of=version_of)
        self._origins.written(report.committed_version, chosen)
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
