"""The Delta table features the embedded engine (delta-rs) writes, and the refusal of a
target with any other one, before anything is written.

Measured, not assumed: each feature below was enabled on a target by delta-spark 4.4
and the target then written by deltasink through delta-rs 1.6 (an upsert, replayed);
docs/deploy.md has the table. A feature outside this set made delta-rs fail the
commit ("Unsupported table features required"), which it reports like a lost race.
"""

from __future__ import annotations

from deltalake import DeltaTable

from deltasink.errors import UnsupportedTableFeatureError

__all__ = ["WRITABLE_FEATURES", "refuse_unwritable"]

#: Writer features of tables the embedded engine was shown to write correctly.
WRITABLE_FEATURES = frozenset(
    {
        "appendOnly",
        "invariants",
        "checkConstraints",
        "changeDataFeed",
        "generatedColumns",
        "columnMapping",
        "deletionVectors",
        "timestampNtz",
        "v2Checkpoint",
        "variantType",
        "variantType-preview",
    }
)

#: Writer protocol 6 without a feature list implies identity columns (not writable).
_LEGACY_IDENTITY_WRITER = 6


def refuse_unwritable(table: DeltaTable, uri: str) -> None:
    """Raise :class:`UnsupportedTableFeatureError` when ``table`` needs a writer feature
    the embedded engine cannot write."""
    protocol = table.protocol()
    features = set(protocol.writer_features or ())
    if protocol.min_writer_version == _LEGACY_IDENTITY_WRITER and not features:
        features.add("identityColumns")
    unsupported = sorted(features - WRITABLE_FEATURES)
    if unsupported:
        raise UnsupportedTableFeatureError(
            f"the target {uri} uses the Delta table feature(s) {unsupported}, which the "
            "embedded engine (delta-rs) cannot write. Write it with engine='spark' (a "
            "Delta-enabled Spark session, e.g. Databricks): versions already staged are "
            "recovered by that engine too. Nothing was written.",
            table=uri,
            features=unsupported,
        )
