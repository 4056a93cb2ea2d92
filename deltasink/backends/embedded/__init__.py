"""The embedded engine: delta-rs makes every Delta commit; data arrives as Arrow from
any PySpark session (Sail, classic without Delta jars) or as a ``pyarrow.Table``.

The modules, one concept each:

* :mod:`.session`: the in-process Sail server behind :func:`embedded_spark`.
* :mod:`.backend`: :class:`EmbeddedBackend`, the commit port, wiring the parts below.
* :mod:`.staging`: the staging table (reading, fencing, writing, gc).
* :mod:`.target`: the target table's commits; :mod:`.pruning`: what file statistics
  prove about a batch.
* :mod:`.audit`: write-audit-publish; :mod:`.maintenance`: the maintenance port.
* :mod:`.deltalog`: helpers over delta-rs (opening, refreshing, commit properties).
"""

from __future__ import annotations

from deltasink.backends.deltalog.staging import StagingLog
from deltasink.backends.ports import EngineParts, SinkConfig

from .backend import EmbeddedBackend
from .maintenance import EmbeddedMaintenance
from .publish import TargetWriter
from .sail import embedded_spark, stop_embedded_spark

__all__ = [
    "EmbeddedBackend",
    "EmbeddedMaintenance",
    "connect",
    "embedded_spark",
    "stop_embedded_spark",
]


def connect(config: SinkConfig) -> EngineParts:
    """Open one writer's tables on the embedded engine (nothing is read or written yet)."""
    target = TargetWriter(
        config.target,
        storage_options=config.storage_options,
        max_attempts=config.max_commit_attempts,
        table=config.table,
    )
    staging = StagingLog(
        config.staging,
        target=config.target,
        app_id=config.app_id,
        storage_options=config.storage_options,
    )
    commit = EmbeddedBackend(
        target=target,
        staging=staging,
        app_id=config.app_id,
        spec=config.merge,
        checks=config.checks,
        unverifiable_checks=config.unverifiable_checks,
        check_samples=config.check_samples,
    )
    return EngineParts(commit, EmbeddedMaintenance(target, staging))
