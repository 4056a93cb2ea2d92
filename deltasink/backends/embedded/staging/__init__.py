"""The staging table of one ``(target, app_id)``, written with delta-rs, in focused
parts over one shared log reader:

* :class:`~.log.StagingLog`: opens the table (and checks whom it belongs to), reads the
  staged versions, the recorded spec, checks, quarantine and markers, and the staged
  rows;
* :class:`~.fencing.Epochs`: creates the table and claims or checks the writer epoch
  (fencing);
* :class:`~.writes.StagingWriter`: stages, re-stages and drops versions, and records
  the spec, the checks, the quarantine and the publish intent;
* :class:`~.gc.StagingGc`: expires what no version needs any more.

The layout (one partition and one ``txn``-tagged commit per version) is
:mod:`deltasink.layout`, shared with the spark engine.
"""

from __future__ import annotations

from .fencing import Epochs
from .gc import StagingGc
from .log import StagingLog
from .writes import StagingWriter

__all__ = ["Epochs", "StagingGc", "StagingLog", "StagingWriter"]
