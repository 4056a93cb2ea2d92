"""The staging table's layout, the same on both engines, so that an operator can move a
writer from one engine to the other on the same tables (see ``docs/spark-backend.md``).

A staging table is a Delta table partitioned by :data:`VERSION_COLUMN`; staged version
``v`` is partition ``v``, written in one Delta commit tagged ``txn(app_id, v)``. Its
table properties record whom it belongs to, the MergeSpec and checks its versions were
staged with, the writer epoch (fencing) and the quarantined versions; two further
``txn`` markers record the committed mark and the publish intent
(:class:`~deltasink.core.guards.MarkGuard`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone

from deltasink.reserved import VERSION_COLUMN

__all__ = [
    "COMMITTED_SUFFIX",
    "FORMAT",
    "INTENT_SUFFIX",
    "PROP_APP",
    "PROP_CHECKS",
    "PROP_EPOCH",
    "PROP_FORMAT",
    "PROP_QUARANTINE",
    "PROP_SPEC",
    "PROP_TARGET",
    "VERSION_COLUMN",
    "Quarantine",
]

#: The layout's version, in :data:`PROP_FORMAT`.
FORMAT = "1"
PROP_FORMAT = "deltasink.format"
#: The target the staging table belongs to (normalised location or catalog name).
PROP_TARGET = "deltasink.target"
#: The writer (``app_id``) the staging table belongs to.
PROP_APP = "deltasink.appId"
#: The MergeSpec new versions are staged with (JSON), for an operator's recover.
PROP_SPEC = "deltasink.mergeSpec"
#: The job's checks as recorded (:func:`deltasink.checks.encode`).
PROP_CHECKS = "deltasink.checks"
#: The current writer epoch; claiming one fences older writers.
PROP_EPOCH = "deltasink.epoch"
#: Quarantined versions and why (:class:`Quarantine`).
PROP_QUARANTINE = "deltasink.quarantine"
#: ``txn("<app_id>#committed", v)``: the highest version the writer saw committed.
COMMITTED_SUFFIX = "#committed"
#: ``txn("<app_id>#publishing", v)``: a target commit of versions up to ``v`` may have
#: been made (recorded before it is attempted).
INTENT_SUFFIX = "#publishing"


@dataclass(frozen=True)
class Quarantine:
    """The quarantine records of a staging table: the codec of :data:`PROP_QUARANTINE`
    (a JSON object ``{"<version>": {"reason": ..., "at": ...}}``).

    Immutable: :meth:`with_version` and :meth:`without` return new records, and
    :meth:`to_props` gives the table property to write.
    """

    records: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    @classmethod
    def from_props(cls, props: Mapping[str, str]) -> Quarantine:
        """The records in a staging table's properties (none when unset)."""
        text = props.get(PROP_QUARANTINE)
        return cls(json.loads(text) if text else {})

    def reasons(self) -> dict[int, str]:
        """Quarantined version -> the failed check."""
        return {int(v): r["reason"] for v, r in self.records.items()}

    def __contains__(self, version: object) -> bool:
        return str(version) in self.records

    def with_version(self, version: int, reason: str) -> Quarantine:
        """These records plus ``version`` quarantined now for ``reason``."""
        at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        return Quarantine({**self.records, str(version): {"reason": reason, "at": at}})

    def without(self, versions: Iterable[int]) -> Quarantine:
        """These records with the quarantine of ``versions`` lifted."""
        gone = {str(v) for v in versions}
        return Quarantine({v: r for v, r in self.records.items() if v not in gone})

    def to_props(self) -> dict[str, str]:
        """The table property that records these records."""
        return {PROP_QUARANTINE: json.dumps(self.records, sort_keys=True)}
