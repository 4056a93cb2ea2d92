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
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from deltasink.committables import CommitReport
from deltasink.errors import ConfigurationError
from deltasink.sink import DeltaSink
from deltasink.spec import MergeSpec

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
    """

    target: str
    app_id: str
    merge: MergeSpec | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def sink(self, spark: SparkSession | None = None) -> DeltaSink:
        """This process's sink for the writer, built on first use with ``spark`` (the
        session the first micro-batch came with, or the driver's for ``recover()`` and
        ``status()`` at start-up).

        One sink per process keeps one writer epoch (a second sink with the same
        ``app_id`` would fence the first)."""
        key = (self.target, self.app_id, self.options.get("staging"), os.getpid())
        with _LOCK:
            sink = _SINKS.get(key)
            if sink is None:
                sink = DeltaSink(self.target, self.app_id, self.merge, spark=spark, **self.options)
                _SINKS[key] = sink
            return sink

    def __call__(self, df: Any, batch_id: int) -> CommitReport:
        """Write one micro-batch (``batch_id`` is the version) exactly once.

        Raises:
            As :meth:`DeltaSink.foreach_batch`.
        """
        return self.sink(getattr(df, "sparkSession", None)).foreach_batch(df, batch_id)


def foreach_batch_writer(
    target: str | os.PathLike[str],
    app_id: str,
    merge: MergeSpec | None = None,
    **options: Any,
) -> ForeachBatchWriter:
    """A ``foreachBatch`` function for ``DeltaSink(target, app_id, merge, **options)``
    that is safe to pickle (Spark Connect, serverless) and builds its sink lazily, once
    per process, from the micro-batch's session.

    The arguments are checked here, on the driver, by building a sink once, so a bad
    configuration fails before the query starts; nothing is read or written by that.

    Raises:
        ConfigurationError: Invalid arguments, or ``spark=`` given (the micro-batch's
            own session is used where the function runs).
    """
    if "spark" in options:
        raise ConfigurationError(
            "foreach_batch_writer takes no spark=: the function runs where Spark puts it "
            "(another process on serverless) and uses the micro-batch's own session."
        )
    writer = ForeachBatchWriter(os.fspath(target), app_id, merge, dict(options))
    DeltaSink(writer.target, app_id, merge, **options)  # validate now, on the driver
    return writer
