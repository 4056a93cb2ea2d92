"""The Delta table features the embedded engine (delta-rs) writes, and the refusal of a
target with any other one, before anything is written.

Measured, not assumed: each feature below was enabled on a target by delta-spark 4.4
and the target then written by deltasink through delta-rs 1.6 (an upsert, replayed);
docs/deploy.md has the table. A feature outside this set made delta-rs fail the
commit ("Unsupported table features required"), which it reports like a lost race.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from urllib.parse import quote, unquote

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from deltasink.backends.deltalog.tables import arrow_schema
from deltasink.errors import SchemaMismatchError, UnsupportedTableFeatureError
from deltasink.reserved import is_reserved
from deltasink.shapes.schema import align_to_target
from deltasink.shapes.spec import MergeSpec

from .generated import check_rewritable

__all__ = [
    "REWRITTEN_PATHS",
    "TIMESTAMP_PARTITIONS",
    "WRITABLE_FEATURES",
    "definition_takes",
    "refuse_rewritten_paths",
    "refuse_timestamp_partitions",
    "refuse_unwritable",
    "rewritten_paths",
    "unwritable_features",
    "without_evolution",
]

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


def unwritable_features(table: DeltaTable) -> list[str]:
    """The writer features of ``table`` the embedded engine cannot write (sorted)."""
    protocol = table.protocol()
    features = set(protocol.writer_features or ())
    if protocol.min_writer_version == _LEGACY_IDENTITY_WRITER and not features:
        features.add("identityColumns")
    return sorted(features - WRITABLE_FEATURES)


def refuse_unwritable(table: DeltaTable, uri: str) -> None:
    """Raise :class:`UnsupportedTableFeatureError` when ``table`` needs a writer feature
    the embedded engine cannot write."""
    unsupported = unwritable_features(table)
    if unsupported:
        raise UnsupportedTableFeatureError(
            f"the target {uri} uses the Delta table feature(s) {unsupported}, which the "
            "embedded engine (delta-rs) cannot write. Write it with engine='spark' (a "
            "Delta-enabled Spark session, e.g. Databricks): versions already staged are "
            "recovered by that engine too. Nothing was written.",
            table=uri,
            features=unsupported,
        )
    refuse_timestamp_partitions(
        arrow_schema(table), table.metadata().partition_columns, uri, creating=False
    )


#: What :func:`refuse_timestamp_partitions` names among the refused features.
TIMESTAMP_PARTITIONS = "timestampPartitionColumn"


def refuse_timestamp_partitions(
    schema: pa.Schema, partition_by: Sequence[str], uri: str, *, creating: bool
) -> None:
    """Raise :class:`UnsupportedTableFeatureError` when a partition column of the target
    (``creating``: of the target a ``TableSpec`` would create) is a ``TIMESTAMP`` (with a
    zone; ``TIMESTAMP_NTZ`` is fine).

    delta-rs records such a partition value without a zone (the UTC wall clock), which
    Spark reads in its session time zone: outside UTC every such row's hour comes back
    shifted. Delta's UTC form (``2024-01-01T20:00:00.000000Z``, what delta-spark 4
    writes) cannot be put into delta-rs's own commit, and a second commit re-recording
    it would leave readers between the two, and a crash in between, with the shifted
    hour: so the embedded engine writes no such target (its compaction on a local
    table writes the UTC form itself, :mod:`.swap`)."""
    wanted = {c.lower() for c in partition_by}
    zoned = [
        f.name
        for f in schema
        if f.name.lower() in wanted and pa.types.is_timestamp(f.type) and f.type.tz is not None
    ]
    if zoned:
        which = "would partition by" if creating else "is partitioned by"
        raise UnsupportedTableFeatureError(
            f"the target {uri} {which} the TIMESTAMP column(s) {zoned}: delta-rs records "
            "their values without a time zone, which Spark reads in its session time zone "
            "(hours shifted outside UTC). Write it with engine='spark' (Delta records the "
            "UTC form), or partition by a DATE or TIMESTAMP_NTZ column. Nothing was staged.",
            table=uri,
            features=[TIMESTAMP_PARTITIONS],
        )


def without_evolution(table: DeltaTable, data: pa.Table, spec: MergeSpec, uri: str) -> MergeSpec:
    """``spec`` as a write of ``data`` into ``table`` runs it: on a column-mapped
    target, whose schema delta-rs cannot evolve ("not yet supported", at every commit),
    ``schema_evolution`` is dropped when the batch fits the target as it is, and refused
    by name otherwise (before anything is staged, and on each commit's snapshot).

    Raises:
        UnsupportedTableFeatureError: The batch needs the schema of a column-mapped
            target to change.
    """
    if not spec.schema_evolution:
        return spec
    if table.metadata().configuration.get("delta.columnMapping.mode", "none") == "none":
        return spec
    values = data.drop_columns([c for c in data.column_names if is_reserved(c)])
    try:
        align_to_target(values, arrow_schema(table), evolve=False, table=uri)
    except SchemaMismatchError as exc:
        raise UnsupportedTableFeatureError(
            f"the target {uri} uses column mapping, whose schema the embedded engine "
            f"(delta-rs) cannot evolve, and this batch needs it to ({exc}). Add the "
            "column first (ALTER TABLE ... ADD COLUMN), or write with engine='spark'. "
            "Nothing was staged.",
            table=uri,
            features=["columnMapping"],
        ) from exc
    return replace(spec, schema_evolution=False)


def definition_takes(table: DeltaTable, data: pa.Table, spec: MergeSpec, uri: str) -> MergeSpec:
    """Whether snapshot ``table``'s definition takes a write of ``data`` by ``spec``:
    before a version is staged, and again on the snapshot its commit is made on. Raises
    (by name, a refusal) as :func:`refuse_unwritable`, :func:`refuse_rewritten_paths`,
    :func:`~.generated.check_rewritable` and :func:`without_evolution` do; returns
    ``spec`` as the write runs it."""
    refuse_unwritable(table, uri)
    refuse_rewritten_paths(table, spec, uri)
    check_rewritable(table, spec, uri)
    return without_evolution(table, data, spec, uri)


#: What :func:`refuse_rewritten_paths` names among the refused features.
REWRITTEN_PATHS = "pathsDeltaRsRewrites"
#: The characters delta-rs 1.6 leaves unencoded in a path it writes (RFC 3986's path
#: characters less ``*``; with Python's own ``A-Z a-z 0-9 _ . - ~``), measured.
_KEPT = "/!$&'()+,;=:@"
#: A path with a character outside those, or a ``%`` not followed by two upper-case
#: hex digits, may be one delta-rs encodes otherwise (the rest cannot).
_SUSPECT = r"[^A-Za-z0-9/._~!$&'()+,;=:@%-]|%[0-9A-F]?[^0-9A-F]|%[0-9A-F]?$"


def rewritten_paths(table: DeltaTable) -> list[str]:
    """The live files' paths (as the log holds them) that delta-rs would write otherwise
    in the ``remove`` of a file it rewrites: Spark leaves non-ASCII characters (and a
    few others) unencoded (``p=Zürich/part-0.parquet``), delta-rs encodes them
    (``p=Z%C3%BCrich/...``), and Delta matches a remove to its add by the path's text.
    Absolute paths (a shallow clone's) are left out. Only partition directories carry
    such characters (data files are named ``part-<n>-<uuid>...``): an unpartitioned
    table's log is not read."""
    if not table.metadata().partition_columns:
        return []
    paths = pa.table(table.get_add_actions(flatten=False)).column("path")
    suspect = paths.filter(pc.match_substring_regex(paths, _SUSPECT))
    found = [str(p) for p in suspect.to_pylist()]
    return [
        p
        for p in found
        if "://" not in p and not p.startswith("/") and quote(unquote(p), safe=_KEPT) != p
    ]


def refuse_rewritten_paths(table: DeltaTable, spec: MergeSpec, uri: str) -> None:
    """Raise :class:`UnsupportedTableFeatureError` when a write by ``spec`` would make
    delta-rs remove a file under another path than its add's (:func:`rewritten_paths`):
    the file would stay live beside its rewritten rows, every row of it twice (measured
    on delta-rs 1.6.6: a MERGE, an overwrite, a DELETE). Append and insert remove no
    file."""
    if spec.mode in ("append", "insert"):
        return
    found = rewritten_paths(table)
    if found:
        raise UnsupportedTableFeatureError(
            f"the target {uri} holds {len(found)} file(s) whose path the log records with "
            f"characters Spark leaves unencoded (e.g. {found[0]!r}); delta-rs would remove "
            "such a file under its own encoding of the path, which Delta does not match "
            "to the file, and its rows would stay beside their rewritten copies. Write it "
            "with engine='spark' (mode='append' or 'insert' removes no file). Nothing was "
            "staged.",
            table=uri,
            features=[REWRITTEN_PATHS],
        )
