"""``deltasink.status``, the path the job templates (``jobs/maintenance.py``) import: a
writer's ``SinkStatus`` and the check that a writer exists, which live in
:mod:`deltasink.ops.status` since the layout of issue 27."""

from __future__ import annotations

from deltasink.ops.status import SinkStatus, require_writer, writers_of

__all__ = ["SinkStatus", "require_writer", "writers_of"]
