"""The stream writer of a :class:`~deltasink.sink.DeltaSink` (``sink.foreach_batch``): a
micro-batch's origin read from its query's checkpoint, placed at a version by the rule of
:mod:`deltasink.stream.placing` over what the writer holds (:class:`StreamOrigins`), then
written through the core with Spark's replay rule."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from deltasink.core.committables import CommitReport, LogState, Placement
from deltasink.core.protocol import TwoPhaseCommit
from deltasink.errors import ConfigurationError
from deltasink.input.files import file_rows
from deltasink.inputs import Batch
from deltasink.stream.checkpoint import row_files_needed, stream_origin, with_row_files
from deltasink.stream.origins import StreamOrigins
from deltasink.stream.placing import Decision

__all__ = ["StreamWriter", "no_foreach_batch_on_the_embedded_session"]


class StreamWriter:
    """Writes the micro-batches of streaming queries for one writer.

    Args:
        target: The target (for messages).
        app_id: The writer (for messages).
        origins: What the writer's versions recorded, kept between batches.
        core: The two-phase commit the batches are written through.
        after: What the sink does with each call's report (post-commit hooks, the
            ``on_quarantine`` policy); returns the report.
    """

    def __init__(
        self,
        *,
        target: str,
        app_id: str,
        origins: StreamOrigins,
        core: TwoPhaseCommit[object],
        after: Callable[[CommitReport], CommitReport],
    ) -> None:
        self.target = target
        self.app_id = app_id
        self._origins = origins
        self._core = core
        self._after = after

    def pickling_refused(self, spark: Any) -> ConfigurationError:
        """Why the sink cannot be pickled (Spark Connect pickles a ``foreachBatch``
        function to run it in a Python worker of the server, and a bound
        ``sink.foreach_batch`` would carry the sink's session and open tables into
        another process): the way out on the embedded session (``spark``, else the
        active one), or on Spark Connect."""
        from deltasink.backends import active_session, embedded_session

        if embedded_session(spark if spark is not None else active_session()):
            return no_foreach_batch_on_the_embedded_session(self.target, self.app_id)
        return ConfigurationError(
            f"a DeltaSink (app {self.app_id!r}) cannot be pickled: on Spark Connect "
            "(serverless, standard access mode) foreachBatch pickles its function, so pass "
            "foreach_batch_writer(target, app_id, merge, checkpoint=...) instead of "
            "sink.foreach_batch.",
            table=self.target,
            app_id=self.app_id,
        )

    def _write(
        self, df: Batch, version: int, *, place: Callable[[LogState], Placement] | None = None
    ) -> CommitReport:
        return self._after(self._core.write(df, version, replays_last_only=True, place=place))

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
        (:mod:`deltasink.stream.placing`), from the *newest version the writer holds*
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
            DeltaSinkError: As :meth:`write` otherwise.
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
            return self._write(df, batch_id)
        if row_files_needed(origin):  # Auto Loader: its files are in the rows only
            split = file_rows(df)
            if split is not None:
                df, origin = split.batch, with_row_files(origin, list(split.counts))
        decided: list[Decision] = []
        place = self._origins.placer(df, origin, resume=resume, decided=decided)
        report = self._write(df, batch_id, place=place)
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
