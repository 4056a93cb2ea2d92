"""``SinkStatus``: what one writer has staged and committed, as ``status()`` reports
it (and the CLI prints it)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from deltasink.core.committables import StagedVersion
from deltasink.errors import ConfigurationError
from deltasink.locations import STAGING_SUFFIX, is_local, normalize_uri
from deltasink.ops.origin import BatchOrigin
from deltasink.shapes.spec import MergeSpec

__all__ = ["SinkStatus", "json_spec", "require_writer", "writers_of"]


@dataclass(frozen=True)
class SinkStatus:
    """What one writer has staged and committed, read from the two Delta logs.

    Attributes:
        target: The target table location.
        staging: The staging table location.
        app_id: The writer.
        engine: The backend doing the Delta writes (``embedded`` or ``spark``).
        engine_reason: Why that backend was chosen.
        committed_version: The target's committed ``txn`` version, or ``None``.
        pending_versions: Staged, uncommitted versions, ascending.
        pending: The same, with rows and staging time.
        leftover_versions: Committed versions whose staging data is not yet removed.
        target_exists: Whether the target table exists yet.
        merge: The MergeSpec recorded in the staging table, if any.
        quarantined: Quarantined versions and the failed check, if any.
        origin: The origin recorded by the writer's newest target commit that recorded
            one (streaming query, batch, source positions; or a batch job's position),
            when asked for (``status(with_origin=True)``, the CLI).
    """

    target: str
    staging: str
    app_id: str
    engine: str
    engine_reason: str
    committed_version: int | None
    pending_versions: list[int]
    pending: tuple[StagedVersion, ...] = ()
    leftover_versions: list[int] = field(default_factory=list)
    target_exists: bool = False
    merge: MergeSpec | None = None
    quarantined: dict[int, str] = field(default_factory=dict)
    origin: BatchOrigin | None = None

    @property
    def writer_exists(self) -> bool:
        """Whether this writer exists: the target holds its ``txn`` marker or its staging
        table records a MergeSpec. ``False`` for a mistyped path or app id."""
        return self.committed_version is not None or self.merge is not None

    def to_dict(self, *, now: datetime | None = None) -> dict[str, Any]:
        """A JSON-ready dict (the CLI's ``--json`` output)."""
        now = now or datetime.now(timezone.utc)
        return {
            "target": self.target,
            "staging": self.staging,
            "app_id": self.app_id,
            "engine": self.engine,
            "engine_reason": self.engine_reason,
            "target_exists": self.target_exists,
            "committed_version": self.committed_version,
            "pending_versions": self.pending_versions,
            "pending": [
                {
                    "version": s.version,
                    "rows": s.rows,
                    "staged_at": s.staged_at.isoformat(),
                    "age_s": round((now - s.staged_at).total_seconds(), 3),
                }
                for s in self.pending
            ],
            "leftover_versions": self.leftover_versions,
            "quarantined": [
                {"version": v, "reason": r} for v, r in sorted(self.quarantined.items())
            ],
            "merge": None if self.merge is None else json_spec(self.merge),
            "origin": None if self.origin is None else self.origin.to_dict(),
        }


def json_spec(spec: MergeSpec) -> dict[str, Any]:
    """A MergeSpec as a plain dict."""
    data: dict[str, Any] = json.loads(spec.to_json())
    return data


def writers_of(target: str) -> list[str]:
    """The app ids with a default staging table next to ``target``, sorted (local
    targets only: on an object store, or with a staging location of the job's own,
    nothing is listed)."""
    root = normalize_uri(target) + STAGING_SUFFIX
    if not is_local(root) or not os.path.isdir(root):
        return []
    return sorted(e.name for e in os.scandir(root) if e.is_dir())


def require_writer(st: SinkStatus) -> None:
    """Refuse a writer that does not exist, so that a mistyped path or app id never
    reads as "healthy, nothing pending" (the CLI and jobs/maintenance.py call it).

    Raises:
        ConfigurationError: Neither the target's log holds a ``txn`` marker of
            ``st.app_id`` nor does its staging table exist; the message names the
            writers found for the target.
    """
    if st.writer_exists:
        return
    found = writers_of(st.target)
    hint = f" Writers found for this target: {', '.join(found)}." if found else ""
    where = "exists" if st.target_exists else "does not exist"
    raise ConfigurationError(
        f"no writer {st.app_id!r} on {st.target}: the target {where}, holds no txn marker "
        f"of that app, and there is no staging table at {st.staging}.{hint} Check the "
        "path, the app id, and the staging location if the job sets one.",
        table=st.target,
        app_id=st.app_id,
    )
