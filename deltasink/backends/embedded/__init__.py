"""The embedded engine: delta-rs makes every Delta commit; data arrives as Arrow from
any PySpark session (Sail, classic without Delta jars) or as a ``pyarrow.Table``.

The modules, one concept each (the same file names as the spark engine's for the same
jobs; what both engines read and write with delta-rs is in
:mod:`deltasink.backends.deltalog`):

* :mod:`.sail`: the in-process Sail server behind :func:`embedded_spark`;
  :mod:`.transfer`: a Spark DataFrame's rows into Arrow.
* :mod:`.backend`: :class:`EmbeddedBackend`, the commit port, wiring the parts below;
  :mod:`.schemas`: what a batch must fit; :mod:`.claims`: the writer role and the
  publish intent.
* :mod:`.fencing`: creating the staging table and fencing its writers; :mod:`.stage`:
  writing it; :mod:`.gc`: expiring it; :mod:`.cache`: batches kept for their publish.
* :mod:`.publish`: the target table's commits (retries, then the post-commit work),
  each attempt's steps in :mod:`.attempt` (the markers checked, the batch shaped,
  written), one writer per merge mode in :mod:`.modes`; :mod:`.prune`: what file statistics prove about a batch;
  :mod:`.scd2`: SCD2 on delta-rs; :mod:`.features`: the table features delta-rs writes.
* :mod:`.audit`: write-audit-publish; :mod:`.maintenance`: the maintenance port.
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
