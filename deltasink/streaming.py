"""A ``foreachBatch`` function that works wherever Spark runs it.

On classic compute Spark calls the ``foreachBatch`` function in the driver process, so
``foreachBatch(sink.foreach_batch)`` is enough. On Spark Connect compute (Databricks
serverless and standard access mode, Spark 4 Connect) Spark pickles the function and
runs it in a separate Python process: a bound method drags the sink, its session and its
open tables into the pickle, which fails or, worse, runs against objects of another
process. :func:`foreach_batch_writer` returns a small picklable callable holding only the
sink's arguments; it builds the sink where it runs, from the micro-batch's own session,
once per process, and writes each micro-batch with :meth:`DeltaSink.foreach_batch`::

    from deltasink import MergeSpec, foreach_batch_writer

    write = foreach_batch_writer("main.sales.orders", "orders-stream",
                                 MergeSpec(keys=["order_id"]))
    write.sink(spark).recover()          # at start-up, on the driver
    (df_stream.writeStream.foreachBatch(write)
        .option("checkpointLocation", checkpoint).start())

Each version's target commit records the query's identity, the batch id and the source
positions (:mod:`deltasink.ops.origin`). A micro-batch of another query than the one that
committed the current version (a deleted or changed checkpoint) is refused with
:class:`~deltasink.errors.CheckpointResetError`, nothing written. To continue with a new
checkpoint, start the new query from the positions ``deltasink offsets`` prints and pass
``resume=True``: its batches become the versions after the committed one.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from deltasink.backends import active_session, connect_session, embedded_session
from deltasink.core.committables import CommitReport
from deltasink.errors import ConfigurationError
from deltasink.shapes.spec import MergeSpec
from deltasink.sink import DeltaSink
from deltasink.stream.writer import no_foreach_batch_on_the_embedded_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["ForeachBatchWriter", "foreach_batch_writer"]

# The sinks this process built, by writer: one per (target, app_id, staging, pid).
_SINKS: dict[tuple[str, str, str | None, int], DeltaSink] = {}
_LOCK = threading.Lock()


@dataclass(frozen=True)
class ForeachBatchWriter:
    """The picklable ``foreachBatch`` function of :func:`foreach_batch_writer`.

    Attributes:
        target: The sink's target (path, URI or catalog name).
        app_id: The writer's app id; the micro-batch id is the version.
        merge: How rows are applied.
        options: Further :class:`~deltasink.DeltaSink` keyword arguments (all but
            ``spark``, which is the micro-batch's session where it runs).
        resume: Continue right after the committed version when it was committed by
            another query (:meth:`DeltaSink.foreach_batch`).
        checkpoint: The query's ``checkpointLocation``, read for its identity and
            positions (needed on Spark Connect and serverless; found by itself on
            classic compute).
        identify_query: Refuse a Spark Connect micro-batch when the query cannot be
            identified (no ``checkpoint``); ``False`` opts out (see
            :func:`foreach_batch_writer`).
    """

    target: str
    app_id: str
    merge: MergeSpec | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    resume: bool = False
    checkpoint: str | None = None
    identify_query: bool = True

    def sink(self, spark: SparkSession | None = None) -> DeltaSink:
        """This process's sink for the writer, built on first use with ``spark`` (the
        session the first micro-batch came with, or the driver's for ``recover()`` and
        ``status()`` at start-up).

        One sink per process keeps one writer (a second sink with the same ``app_id``
        would fence the first).

        Raises:
            ConfigurationError: ``spark`` is the embedded session (Sail), which has no
                ``foreachBatch``.
        """
        if spark is not None and embedded_session(spark):
            raise no_foreach_batch_on_the_embedded_session(self.target, self.app_id)
        key = (self.target, self.app_id, self.options.get("staging"), os.getpid())
        with _LOCK:
            sink = _SINKS.get(key)
            if sink is None:
                sink = DeltaSink(self.target, self.app_id, self.merge, spark=spark, **self.options)
                _SINKS[key] = sink
            return sink

    def __call__(self, df: Any, batch_id: int) -> CommitReport:
        """Write one micro-batch exactly once (:meth:`DeltaSink.foreach_batch`).

        Raises:
            ConfigurationError: A Spark Connect micro-batch without ``checkpoint`` while
                ``identify_query`` is on (nothing written), or the embedded session.
            DeltaSinkError: Otherwise as :meth:`DeltaSink.foreach_batch`.
        """
        session = getattr(df, "sparkSession", None)
        if session is not None and connect_session(session):
            self._require_identity(session)
        sink = self.sink(session)
        return sink.foreach_batch(df, batch_id, resume=self.resume, checkpoint=self.checkpoint)

    def _require_identity(self, session: Any) -> None:
        if self.checkpoint is None and self.identify_query and not embedded_session(session):
            raise no_query_identity(self.target, self.app_id)


def foreach_batch_writer(
    target: str | os.PathLike[str],
    app_id: str,
    merge: MergeSpec | None = None,
    *,
    resume: bool = False,
    checkpoint: str | os.PathLike[str] | None = None,
    identify_query: bool = True,
    **options: Any,
) -> ForeachBatchWriter:
    """A ``foreachBatch`` function for ``DeltaSink(target, app_id, merge, **options)``
    that is safe to pickle (Spark Connect, serverless) and builds its sink lazily, once
    per process, from the micro-batch's session.

    The arguments are checked here, on the driver, by building a sink once, so a bad
    configuration fails before the query starts; nothing is read or written by that.

    Args:
        target: As :class:`~deltasink.DeltaSink`.
        app_id: As :class:`~deltasink.DeltaSink`.
        merge: As :class:`~deltasink.DeltaSink`.
        resume: Continue a new or restored checkpoint right after the newest version
            the app id holds, instead of refusing its batches
            (:meth:`DeltaSink.foreach_batch`): pending versions are published first, a
            file source's rows of files already held are left out; start other sources
            from the positions ``deltasink offsets`` prints. Only the run that resumes
            needs it: the query's restarts map their batches the same way without it
            (the mapping is read back from the target), and with it off again a later
            lost checkpoint is refused again rather than resumed from wherever it starts.
        checkpoint: The query's ``checkpointLocation`` (see :class:`ForeachBatchWriter`).
            On Spark Connect (serverless, standard access mode, Databricks Connect) it
            is the only way to identify the query, and so required there.
        identify_query: ``True`` (default): on Spark Connect without ``checkpoint``
            the writer is refused, here when the driver's session is a Connect one,
            else at the first micro-batch (nothing written). ``False`` opts out: each
            ``batch_id`` is then the version and nothing tells a reset checkpoint
            from a replay: a new checkpoint's batch whose id equals the committed
            version is dropped as a replay (its rows never land), and those below it
            are refused with :class:`~deltasink.errors.InvalidVersionError`, where
            :class:`~deltasink.errors.CheckpointResetError` would name the query.
        **options: Further :class:`~deltasink.DeltaSink` keyword arguments.

    Raises:
        ConfigurationError: Invalid arguments; ``spark=`` given (the micro-batch's own
            session is used where the function runs); the active session is the
            embedded one (Sail has no ``foreachBatch``); or, on Spark Connect, no
            ``checkpoint`` while ``identify_query`` is on.
    """
    if "spark" in options:
        raise ConfigurationError(
            "foreach_batch_writer takes no spark=: the function runs where Spark puts it "
            "(another process on serverless) and uses the micro-batch's own session."
        )
    if resume and not identify_query:
        raise ConfigurationError(
            "resume=True needs the query's identity; it cannot go with identify_query=False."
        )
    writer = ForeachBatchWriter(
        os.fspath(target),
        app_id,
        merge,
        dict(options),
        resume=bool(resume),
        checkpoint=None if checkpoint is None else os.fspath(checkpoint),
        identify_query=bool(identify_query),
    )
    DeltaSink(writer.target, app_id, merge, **options)  # validate now, on the driver
    driver = active_session()
    if driver is not None and embedded_session(driver):
        raise no_foreach_batch_on_the_embedded_session(writer.target, app_id)
    if driver is not None and connect_session(driver):
        writer._require_identity(driver)
    return writer


def no_query_identity(target: str, app_id: str) -> ConfigurationError:
    """The refusal of a Spark Connect writer that cannot identify its query."""
    return ConfigurationError(
        "on Spark Connect (serverless, standard access mode, Databricks Connect) a "
        "foreachBatch function cannot see which streaming query calls it, so a deleted or "
        "reset checkpoint could not be told from a replay. Pass "
        "foreach_batch_writer(..., checkpoint=<the query's checkpointLocation>), or opt "
        "out with identify_query=False (batch ids are then versions: a new checkpoint's "
        "batch at the committed version is dropped as a replay, its rows lost).",
        table=target,
        app_id=app_id,
    )
