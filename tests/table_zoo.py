"""The table zoo's generator (issue 43): table definitions made of Delta features users
combine, and the batches and steps a case sends through each engine and through plain
delta-spark (``tests/zoo_driver.py`` runs them, ``tests/test_table_zoo.py`` compares).

A :class:`Definition` is one target as a user's delta-spark makes it (``CREATE TABLE``,
``ALTER TABLE ... ADD CONSTRAINT``, a first ``INSERT`` whose files delta-spark writes with
its own encodings, INT96 timestamps included), in one session time zone. A :class:`Case`
is a definition, a deltasink mode and a list of steps: batches (``pyarrow`` tables of the
definition's batch columns), ``optimize`` (a compaction) and ``checkpoint``. Everything is
drawn from one ``random.Random`` (``tests/generated.py``'s seed), so a run is repeated by
its seed.
"""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

__all__ = ["FEATURES", "MODES", "Case", "Definition", "draw_cases", "draw_definition"]

UTC = dt.timezone.utc
TS = pa.timestamp("us", "UTC")
NTZ = pa.timestamp("us")
NEST = pa.struct(
    [("t", TS), ("a", pa.list_(TS)), ("m", pa.map_(pa.string(), TS))]
)  # a timestamp in a struct, an array and a map
NEST_DDL = "STRUCT<t: TIMESTAMP, a: ARRAY<TIMESTAMP>, m: MAP<STRING, TIMESTAMP>>"

#: Features a definition combines (the matrix's rows), beside its partitioning.
FEATURES = (
    "generated column (n / 4)",
    "generated column (CAST(ts AS DATE))",
    "default column",
    "check constraint",
    "column mapping",
    "deletion vectors",
    "change data feed",
    "identity column",
    "timestamp_ntz column",
    "nested timestamps",
    "stats: numIndexedCols=1",
    "stats: statsColumns=id,v",
    "row tracking",
    "in-commit timestamps",
    "type widening",
    "v2 checkpoints",
    "vacuum protocol check",
    "liquid clustering",
)
PARTITIONS = ("string", "date", "timestamp", "timestamp_ntz")
ZONES = ("UTC", "America/Los_Angeles")
#: deltasink modes (``MergeSpec``s) a case runs; ``upsert+delete`` is ``delete_when``,
#: ``upsert+evolve`` is ``schema_evolution=True`` with a column the target lacks.
MODES = ("upsert", "insert", "append", "replace", "upsert+delete", "upsert+evolve")

#: String partition values users have: spaces, ``:``, ``%``, ``=``, non-ASCII, an
#: already-escaped look-alike, null and ``''`` (the protocol's null partition).
ODD_STRINGS = ("a b", "x:y", "50%", "k=v", "\u00fc\u20ac \u65e5", "%2520", "/.", None, "")
#: Instants around midnight UTC and Los Angeles' DST changes (dates differ by zone),
#: and the ends of the range (INT96 outside 1677-2262).
INSTANTS = (
    dt.datetime(2026, 1, 1, 0, 30, tzinfo=UTC),
    dt.datetime(2026, 3, 8, 10, 30, 0, 123456, tzinfo=UTC),
    dt.datetime(2026, 11, 1, 8, 59, 59, 999999, tzinfo=UTC),
    dt.datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC),
    dt.datetime(2000, 2, 29, 7, 0, tzinfo=UTC),
)
EDGES = (dt.datetime(1, 1, 1, tzinfo=UTC), dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC))


@dataclass(frozen=True)
class Definition:
    """One target: its features, partitioning (``None``: unpartitioned) and session zone."""

    name: str
    features: tuple[str, ...]
    partition: str | None
    zone: str

    def has(self, feature: str) -> bool:
        return feature in self.features

    def labels(self) -> tuple[str, ...]:
        """The matrix rows this definition counts under."""
        part = f"partitioned by {self.partition}" if self.partition else "unpartitioned"
        return (*self.features, part, f"session zone {self.zone}")

    def batch_schema(self) -> pa.Schema:
        """The columns batches carry (computed columns are the table's to fill)."""
        fields = [("id", pa.int64()), ("n", pa.int32()), ("v", pa.string()), ("ts", TS)]
        if self.has("timestamp_ntz column"):
            fields.append(("ntz", NTZ))
        if self.has("nested timestamps"):
            fields.append(("nest", NEST))
        if self.partition:
            kind = {"string": pa.string(), "date": pa.date32(), "timestamp": TS}
            fields.append(("p", kind.get(self.partition, NTZ)))
        return pa.schema(fields)

    def computed(self) -> dict[str, str]:
        """Computed column -> its kind (``generated``, ``default``, ``identity``)."""
        out = {}
        if self.has("generated column (n / 4)"):
            out["g"] = "generated"
        if self.has("generated column (CAST(ts AS DATE))"):
            out["gd"] = "generated"
        if self.has("default column"):
            out["d"] = "default"
        if self.has("identity column"):
            out["sk"] = "identity"
        return out

    def ddl(self, location: str) -> list[str]:
        """The statements delta-spark makes the table with (before its first rows)."""
        kinds = {"string": "STRING", "date": "DATE", "timestamp": "TIMESTAMP"}
        cols = ["id BIGINT", "n INT", "v STRING", "ts TIMESTAMP"]
        if self.has("timestamp_ntz column"):
            cols.append("ntz TIMESTAMP_NTZ")
        if self.has("nested timestamps"):
            cols.append(f"nest {NEST_DDL}")
        if self.has("generated column (n / 4)"):
            cols.append("g DOUBLE GENERATED ALWAYS AS (n / 4)")
        if self.has("generated column (CAST(ts AS DATE))"):
            cols.append("gd DATE GENERATED ALWAYS AS (CAST(ts AS DATE))")
        if self.has("default column"):
            cols.append("d INT DEFAULT 7")
        if self.has("identity column"):
            cols.append("sk BIGINT GENERATED ALWAYS AS IDENTITY")
        if self.partition:
            cols.append(f"p {kinds.get(self.partition, 'TIMESTAMP_NTZ')}")
        props = {
            "default column": ("delta.feature.allowColumnDefaults", "supported"),
            "column mapping": ("delta.columnMapping.mode", "name"),
            "deletion vectors": ("delta.enableDeletionVectors", "true"),
            "change data feed": ("delta.enableChangeDataFeed", "true"),
            "stats: numIndexedCols=1": ("delta.dataSkippingNumIndexedCols", "1"),
            "stats: statsColumns=id,v": ("delta.dataSkippingStatsColumns", "id,v"),
            "row tracking": ("delta.enableRowTracking", "true"),
            "in-commit timestamps": ("delta.enableInCommitTimestamps", "true"),
            "type widening": ("delta.enableTypeWidening", "true"),
            "v2 checkpoints": ("delta.checkpointPolicy", "v2"),
            "vacuum protocol check": ("delta.feature.vacuumProtocolCheck", "supported"),
        }
        chosen = [props[f] for f in self.features if f in props]
        text = f"CREATE TABLE delta.`{location}` ({', '.join(cols)}) USING DELTA"
        if self.partition:
            text += " PARTITIONED BY (p)"
        elif self.has("liquid clustering"):
            text += " CLUSTER BY (id)"
        if chosen:
            text += " TBLPROPERTIES (" + ", ".join(f"'{k}' = '{v}'" for k, v in chosen) + ")"
        out = [text]
        if self.has("check constraint"):
            out.append(f"ALTER TABLE delta.`{location}` ADD CONSTRAINT nonneg CHECK (n >= 0)")
        return out


@dataclass
class Case:
    """A definition, a mode and its steps (a ``pa.Table``, ``"optimize"`` or
    ``"checkpoint"``); the first batch is delta-spark's own ``INSERT`` (``seed_rows``)."""

    number: int
    definition: Definition
    mode: str
    seed_rows: pa.Table
    steps: list[Any] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.number:04d}-{self.definition.name}-{self.mode}"

    def batches(self) -> list[pa.Table]:
        return [s for s in self.steps if isinstance(s, pa.Table)]


def draw_definition(rnd: random.Random, number: int) -> Definition:
    """A definition of 1-3 features (mostly the first twelve: a later one is one the
    embedded engine refuses, and hides the others), a partitioning (or none), a zone."""
    pool = FEATURES[:12] if rnd.random() < 0.8 else FEATURES
    features = tuple(sorted(rnd.sample(pool, rnd.randint(1, 3)), key=FEATURES.index))
    partition = rnd.choice((None, *PARTITIONS, "string"))
    if "liquid clustering" in features:
        partition = None  # clustered or partitioned, not both
    zone = rnd.choice(ZONES)
    return Definition(f"d{number:03d}", features, partition, zone)


def _instant(rnd: random.Random, edges: bool) -> dt.datetime | None:
    roll = rnd.random()
    if roll < 0.1:
        return None
    if edges and roll < 0.18:
        return rnd.choice(EDGES)
    return rnd.choice(INSTANTS) + dt.timedelta(hours=rnd.randint(-30, 30))


def _partition_value(rnd: random.Random, kind: str, non_null: bool) -> Any:
    if kind == "string":
        value = rnd.choice(ODD_STRINGS)
        return rnd.choice(ODD_STRINGS[:6]) if non_null and not value else value
    if not non_null and rnd.random() < 0.15:
        return None
    instant = rnd.choice(INSTANTS[:3]) + dt.timedelta(hours=rnd.choice((0, 9, 17)))
    if kind == "date":
        return instant.date()
    return instant if kind == "timestamp" else instant.replace(tzinfo=None)


def draw_rows(
    rnd: random.Random, definition: Definition, mode: str, ids: list[int], violate: bool
) -> pa.Table:
    """A batch: one row per id (an upsert's keys are unique), values of every kind."""
    rows = []
    edges = rnd.random() < 0.3
    for i in ids:
        ts = _instant(rnd, edges)
        row: dict[str, Any] = {
            "id": i,
            "n": rnd.randint(0, 40),
            "v": "D" if mode == "upsert+delete" and rnd.random() < 0.3 else rnd.choice("abc"),
            "ts": ts,
        }
        if definition.has("timestamp_ntz column"):
            row["ntz"] = None if ts is None else ts.replace(tzinfo=None)
        if definition.has("nested timestamps"):
            other = _instant(rnd, edges)
            row["nest"] = (
                None
                if rnd.random() < 0.1
                else {"t": ts, "a": [other, ts], "m": [("k", other)] if other else []}
            )
        if definition.partition:
            row["p"] = _partition_value(rnd, definition.partition, mode == "replace")
        rows.append(row)
    if violate and rows:
        rnd.choice(rows)["n"] = -1  # breaks the CHECK constraint (n >= 0)
    return pa.Table.from_pylist(rows, definition.batch_schema())


def draw_cases(rnd: random.Random, count: int, per_definition: int = 5) -> list[Case]:
    """``count`` cases over ``count / per_definition`` definitions (a definition's table
    is made once and copied for each of its cases and engines)."""
    cases: list[Case] = []
    number = 0
    while len(cases) < count:
        definition = draw_definition(rnd, number)
        modes = rnd.sample(MODES, min(per_definition, count - len(cases)))
        seed = draw_rows(rnd, definition, "insert", rnd.sample(range(1, 9), 3), violate=False)
        for mode in modes:
            case = Case(len(cases), definition, mode, seed)
            for _ in range(rnd.randint(1, 3)):
                ids = sorted(rnd.sample(range(1, 11), rnd.randint(1, 4)))
                violate = definition.has("check constraint") and rnd.random() < 0.25
                case.steps.append(draw_rows(rnd, definition, mode, ids, violate))
                if rnd.random() < 0.3:
                    case.steps.append(rnd.choice(("optimize", "checkpoint")))
            if mode == "upsert+evolve":
                first = case.steps[0]
                case.steps[0] = first.append_column("extra", pa.array(["e"] * len(first)))
            cases.append(case)
        number += 1
    return cases
