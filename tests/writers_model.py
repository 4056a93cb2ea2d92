"""Any writer, any order (issue 35): a differential model of one Delta table that every
writer touches, its oracle a plain function of the steps.

A *sequence* draws a table shape (the partition column ``p`` a string, integer or date;
the key ``k`` an integer, string, date, timestamp or double; keys ``(p, k)`` or ``(k)``;
with or without ``null_safe_keys``), creates the table (partitioned by ``p``) with one
plain writer, then runs steps, each picking a writer:

* ``embedded``: a deltasink upsert on the embedded engine (``write``, or versions
  pre-committed and committed together, coalesced), apps ``a`` and ``b``;
* ``spark``: the same through the spark engine (JVM runs only);
* ``rs_merge`` / ``rs_append``: plain delta-rs, an upsert ``MERGE`` by key and a blind
  append of new keys;
* ``spark_merge`` / ``spark_append``: plain delta-spark, ``MERGE INTO`` and ``df.write``
  (JVM runs only; Spark's default Parquet timestamps: INT96);
* ``rs_optimize`` / ``spark_optimize``: ``OPTIMIZE`` from either;
* ``auto_compact``: two deltasink apps writing at once with auto compaction on.

Values are drawn with ``''``, nulls, signed zeros, NaN, timestamps from 0001 to 9999
and dates from 0001 to 9999. The oracle (:class:`Oracle`) is the documented rules, not
the implementation: a key's latest row wins, whichever writer wrote it; in a string
partition column ``''`` is null (the protocol; ``''`` and null are one key); a float key
``-0.0`` is the key ``0.0``; every other value reads back exactly. One documented
refusal: a deltasink write through the embedded engine that would rewrite target files
is refused by name (``UnsupportedTableFeatureError``, nothing written) while a live file
stores INT96 timestamps outside 1677-2262 (which Spark wrote); the oracle reads that
condition off the files' footers, and the plain delta-rs steps that would rewrite such
files (MERGE, OPTIMIZE: delta-rs itself corrupts them, outside deltasink's control) are
left out then. After every step: the target equals the oracle, no key twice, every
``(app, version)`` of deltasink in exactly one commit (its ledger), each marker once.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake

from deltasink import DeltaSink, MergeSpec, TableSpec, UnsupportedTableFeatureError
from deltasink.ops.history import history_from_commits
from tests import support

Row = dict[str, Any]
UTC = dt.timezone.utc
APPS = ("a", "b")

#: The values each column type draws from (edges first).
P_VALUES: dict[str, list[Any]] = {
    "string": ["", "a", "b"],
    "int": [0, 1, -1],
    "date": [dt.date(1, 1, 1), dt.date(1970, 1, 1), dt.date(9999, 12, 31)],
}
K_VALUES: dict[str, list[Any]] = {
    "int": [0, 1, 2, -5],
    "string": ["", "x", "y", "é"],
    "date": [dt.date(1, 1, 1), dt.date(2024, 2, 29), dt.date(9999, 12, 31)],
    "timestamp": [
        dt.datetime(1, 1, 1, tzinfo=UTC),
        dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        dt.datetime(2262, 4, 12, tzinfo=UTC),
        dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    ],
    "double": [0.0, -0.0, 1.5, -2.0],
}
S_VALUES = ["", None, "v", "w"]
TS_VALUES = [
    None,
    dt.datetime(1, 1, 1, tzinfo=UTC),
    dt.datetime(1677, 9, 21, 0, 12, 43, 145225, tzinfo=UTC),
    dt.datetime(1970, 1, 1, tzinfo=UTC),
    dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
]
D_VALUES = [None, 0.0, -0.0, math.nan, 1e308, -1.25]
ARROW = {
    "string": pa.string(),
    "int": pa.int64(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", UTC),
    "double": pa.float64(),
}
SPARK = {
    "string": "string",
    "int": "bigint",
    "date": "date",
    "timestamp": "timestamp",
    "double": "double",
}


@dataclass(frozen=True)
class Shape:
    """The table of one sequence."""

    p: str
    k: str
    keys: tuple[str, ...]
    null_safe: bool

    @property
    def schema(self) -> pa.Schema:
        return pa.schema(
            [
                ("p", ARROW[self.p]),
                ("k", ARROW[self.k]),
                ("s", pa.string()),
                ("ts", ARROW["timestamp"]),
                ("d", pa.float64()),
            ]
        )

    @property
    def ddl(self) -> str:
        return f"p {SPARK[self.p]}, k {SPARK[self.k]}, s string, ts timestamp, d double"

    def key(self, row: Row) -> tuple[Any, ...]:
        """A row's key under the documented rules: ``''`` in the string partition
        column is null; ``-0.0`` is ``0.0``."""
        out = []
        for name in self.keys:
            value = row[name]
            if name == "p" and self.p == "string" and value == "":
                value = None
            if isinstance(value, float) and value == 0.0:
                value = 0.0
            out.append(value)
        return tuple(out)

    def stored(self, row: Row) -> Row:
        """``row`` as the table holds it: ``''`` in the string partition column is null."""
        if self.p == "string" and row["p"] == "":
            return {**row, "p": None}
        return dict(row)

    def table(self, rows: list[Row]) -> pa.Table:
        return pa.Table.from_pylist(rows, self.schema)


@dataclass(frozen=True)
class Step:
    """One writer's step: ``batches`` of rows (several for a coalesced commit)."""

    writer: str
    batches: tuple[tuple[Row, ...], ...] = ()
    app: str = "a"

    def describe(self) -> str:
        return f"{self.writer}({self.app}): {[list(b) for b in self.batches]}"


@dataclass
class Oracle:
    """The documented table: a key's latest row, whoever wrote it."""

    shape: Shape
    rows: dict[tuple[Any, ...], Row] = field(default_factory=dict)

    def apply(self, batch: tuple[Row, ...]) -> None:
        for row in batch:
            self.rows[self.shape.key(row)] = self.shape.stored(row)

    def expected(self) -> list[tuple[Any, ...]]:
        return sorted(canon(self.shape, r) for r in self.rows.values())


def canon(shape: Shape, row: Row) -> tuple[Any, ...]:
    """A row as comparable text: keys by value (``-0.0`` is ``0.0``, ``''`` partition
    is null), every other value exactly (the sign of zero, NaN)."""
    out = []
    for name in ("p", "k", "s", "ts", "d"):
        value = row[name]
        if name == "p" and shape.p == "string" and value == "":
            value = None
        if isinstance(value, float):
            if math.isnan(value):
                text = "nan"
            elif name in shape.keys or value != 0.0:
                text = repr(value if value != 0.0 else 0.0)
            else:
                text = "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
            out.append(("f", text))
        elif isinstance(value, dt.datetime):
            out.append(("t", value.astimezone(UTC).isoformat()))
        else:
            out.append((type(value).__name__, "" if value is None else str(value)))
    return tuple(out)


def read_target(shape: Shape, target: str) -> list[Row]:
    """The target's rows as delta-rs reads them (INT96 as microseconds: exact)."""
    options = ds.ParquetReadOptions(None, coerce_int96_timestamp_unit="us")
    table = DeltaTable(target).to_pyarrow_dataset(parquet_read_options=options).to_table()
    return table.select(shape.schema.names).to_pylist()


def wrapping_int96(target: str) -> bool:
    """Whether a live file of the target stores INT96 timestamps outside 1677-2262
    (read off the footers and values, not from deltasink)."""
    low = dt.datetime(1677, 9, 21, 0, 12, 43, 145225, tzinfo=UTC)
    high = dt.datetime(2262, 4, 11, 23, 47, 16, 854775, tzinfo=UTC)
    for uri in DeltaTable(target).file_uris():
        parquet = pq.ParquetFile(uri.removeprefix("file://"), coerce_int96_timestamp_unit="us")
        schema = parquet.schema
        # every INT96 column: the key `k` may be a timestamp too
        int96 = [
            schema.column(i).name
            for i in range(len(schema))
            if schema.column(i).physical_type == "INT96"
        ]
        for name in int96:
            for value in parquet.read(columns=[name]).column(name).to_pylist():
                if value is not None and not (low <= value.replace(tzinfo=UTC) <= high):
                    return True
    return False


@dataclass
class World:
    """The table and its writers in one sequence; JVM writers need ``spark``."""

    shape: Shape
    target: str
    spark: Any = None
    versions: dict[str, int] = field(default_factory=dict)
    sinks: dict[tuple[str, str], DeltaSink] = field(default_factory=dict)
    layout: TableSpec = field(default_factory=lambda: TableSpec(partition_by=["p"]))

    def sink(self, engine: str, app: str, **kw: Any) -> DeltaSink:
        if (engine, app) not in self.sinks:
            spec = MergeSpec(keys=list(self.shape.keys), null_safe_keys=self.shape.null_safe)
            extra = {"spark": self.spark} if engine == "spark" else {}
            self.sinks[engine, app] = DeltaSink(
                self.target,
                f"{engine}-{app}",
                spec,
                engine=engine,
                table=self.layout,
                **extra,
                **kw,
            )
        return self.sinks[engine, app]

    def next_version(self, engine: str, app: str) -> int:
        key = f"{engine}-{app}"
        self.versions[key] = self.versions.get(key, -1) + 1
        return self.versions[key]

    def data(self, engine: str, rows: tuple[Row, ...]) -> Any:
        table = self.shape.table(list(rows))
        if engine == "spark":
            return self.spark.createDataFrame(table.to_pylist(), self.shape.ddl)
        return table


def create(world: World, how: str) -> None:
    """The empty target, partitioned by ``p``, by a plain writer."""
    shape, target = world.shape, world.target
    if how == "spark":
        frame = world.spark.createDataFrame([], shape.ddl)
        frame.write.format("delta").partitionBy("p").save(target)
    else:
        write_deltalake(target, shape.table([]), partition_by=["p"])


def run_step(world: World, step: Step, oracle: Oracle) -> str:
    """Run ``step``, update ``oracle`` as the rules say; returns what happened."""
    writer = WRITERS[step.writer]
    return writer(world, step, oracle)


def _deltasink(engine: str) -> Callable[[World, Step, Oracle], str]:
    def run(world: World, step: Step, oracle: Oracle) -> str:
        sink = world.sink(engine, step.app)
        refused = engine == "embedded" and wrapping_int96(world.target)
        before = support.table_version(world.target)
        versions = [world.next_version(engine, step.app) for _ in step.batches]
        try:
            if len(step.batches) == 1:
                sink.write(world.data(engine, step.batches[0]), versions[0])
            else:
                for version, rows in zip(versions, step.batches, strict=True):
                    sink.pre_commit(world.data(engine, rows), version)
                sink.commit(versions[-1])
        except UnsupportedTableFeatureError:
            assert refused, "refused although no file holds INT96 outside 1677-2262"
            assert support.table_version(world.target) == before, "written despite refusal"
            world.versions[f"{engine}-{step.app}"] = versions[0] - 1  # nothing was staged
            return "refused"
        assert not refused, "an INT96 file outside 1677-2262 was rewritten, not refused"
        for rows in step.batches:
            oracle.apply(rows)
        return "applied"

    return run


def _on(shape: Shape, spark: bool) -> str:
    parts = []
    for name in shape.keys:
        t, s = f"t.{name}", f"s.{name}"
        if name == "p" and shape.p == "string":
            parts.append(f"coalesce({t}, '') = coalesce({s}, '')")
        elif name == "p" and shape.null_safe:
            parts.append(f"{t} <=> {s}" if spark else f"{t} IS NOT DISTINCT FROM {s}")
        else:
            parts.append(f"{t} = {s}")
    return " AND ".join(f"({p})" for p in parts)  # DataFusion binds IS NOT DISTINCT FROM loosely


def rs_merge(world: World, step: Step, oracle: Oracle) -> str:
    if wrapping_int96(world.target):
        return "skipped: delta-rs rewrites INT96 wrapped"
    rows = step.batches[0]
    table = DeltaTable(world.target)
    merger = table.merge(world.shape.table(list(rows)), _on(world.shape, False), "s", "t")
    columns = {c: f"s.{c}" for c in world.shape.schema.names}
    merger.when_matched_update(columns).when_not_matched_insert(columns).execute()
    oracle.apply(rows)
    return "applied"


def rs_append(world: World, step: Step, oracle: Oracle) -> str:
    rows = tuple(r for r in step.batches[0] if world.shape.key(r) not in oracle.rows)
    write_deltalake(world.target, world.shape.table(list(rows)), mode="append")
    oracle.apply(rows)
    return "applied"


def rs_optimize(world: World, step: Step, oracle: Oracle) -> str:
    if wrapping_int96(world.target):
        return "skipped: delta-rs rewrites INT96 wrapped"
    DeltaTable(world.target).optimize.compact()
    return "applied"


def spark_merge(world: World, step: Step, oracle: Oracle) -> str:
    rows = step.batches[0]
    view = f"source_{uuid.uuid4().hex}"
    world.data("spark", rows).createOrReplaceTempView(view)
    world.spark.sql(
        f"MERGE INTO delta.`{world.target}` AS t USING {view} AS s ON {_on(world.shape, True)} "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    ).collect()
    world.spark.catalog.dropTempView(view)
    oracle.apply(rows)
    return "applied"


def spark_append(world: World, step: Step, oracle: Oracle) -> str:
    rows = tuple(r for r in step.batches[0] if world.shape.key(r) not in oracle.rows)
    world.data("spark", rows).write.format("delta").mode("append").save(world.target)
    oracle.apply(rows)
    return "applied"


def spark_optimize(world: World, step: Step, oracle: Oracle) -> str:
    world.spark.sql(f"OPTIMIZE delta.`{world.target}`").collect()
    return "applied"


def auto_compact(world: World, step: Step, oracle: Oracle) -> str:
    """Two deltasink apps (``c1``, ``c2``) writing disjoint keys at once, with auto
    compaction on for the table (a partition compacts from 2 small files under
    :func:`compaction_from`)."""
    from deltasink.backends.embedded import compaction

    if wrapping_int96(world.target):
        return "skipped: the embedded engine refuses this table"
    table = DeltaTable(world.target)
    if table.metadata().configuration.get(compaction.AUTO_COMPACT) != "true":
        table.alter.set_table_properties({compaction.AUTO_COMPACT: "true"})
    halves = (step.batches[0], step.batches[1])
    errors: list[BaseException] = []

    def write(app: str, rows: tuple[Row, ...]) -> None:
        try:
            sink = world.sink("embedded", app)
            sink.write(world.data("embedded", rows), world.next_version("embedded", app))
        except BaseException as exc:  # reported below, on the test's thread
            errors.append(exc)

    threads = [
        threading.Thread(target=write, args=(app, rows))
        for app, rows in zip(("c1", "c2"), halves, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    for rows in halves:
        oracle.apply(rows)
    return "applied"


@contextlib.contextmanager
def compaction_from(files: int) -> Iterator[None]:
    """Auto compaction from ``files`` small files in a partition (Delta's 50 would
    take 50 steps), for the ``with`` block, process-wide."""
    from deltasink.backends.embedded import compaction

    defaults = compaction.AutoCompact.__init__.__kwdefaults__
    if defaults is None or "min_num_files" not in defaults:
        yield
        return
    saved = defaults["min_num_files"]
    defaults["min_num_files"] = files
    try:
        yield
    finally:
        defaults["min_num_files"] = saved


WRITERS: dict[str, Callable[[World, Step, Oracle], str]] = {
    "embedded": _deltasink("embedded"),
    "spark": _deltasink("spark"),
    "rs_merge": rs_merge,
    "rs_append": rs_append,
    "rs_optimize": rs_optimize,
    "spark_merge": spark_merge,
    "spark_append": spark_append,
    "spark_optimize": spark_optimize,
    "auto_compact": auto_compact,
}
EMBEDDED_WRITERS = ("embedded", "rs_merge", "rs_append", "rs_optimize", "auto_compact")
JVM_WRITERS = ("spark", "spark_merge", "spark_append", "spark_optimize")


def check(world: World, oracle: Oracle, done: list[str]) -> None:
    """The invariants after a step (``done``: the steps so far, for the message)."""
    found = read_target(world.shape, world.target)
    keys = [world.shape.key(r) for r in found]
    trail = "\n  ".join(done)
    assert len(keys) == len(set(keys)), f"a key twice after:\n  {trail}\n{sorted(map(str, keys))}"
    got = sorted(canon(world.shape, r) for r in found)
    assert got == oracle.expected(), (
        f"target != oracle after:\n  {trail}\n{got}\n{oracle.expected()}"
    )
    commits = support.log_commits(world.target)
    infos = [
        {**a["commitInfo"], "version": v}
        for v, actions in commits.items()
        for a in actions
        if "commitInfo" in a
    ]
    for key in world.versions:
        ledger = [e.versions for e in history_from_commits(infos, key)]
        flat = [v for versions in ledger for v in versions]
        assert len(flat) == len(set(flat)), (
            f"{key}: a version in two commits {ledger} after:\n  {trail}\n"
            + "\n".join(
                f"{i['version']}: {i.get('operation')} {i.get('userMetadata')}" for i in infos
            )
        )
        markers = support.txn_commits(world.target, key)
        assert all(len(at) == 1 for at in markers.values()), f"{key}: a marker twice {markers}"


def run_sequence(world: World, creator: str, steps: list[Step]) -> list[str]:
    """Create the table, run ``steps`` checking after each; returns the trail."""
    create(world, creator)
    oracle = Oracle(world.shape)
    done = [f"created by {creator}, shape {world.shape}"]
    for step in steps:
        outcome = run_step(world, step, oracle)
        done.append(f"{step.describe()} -> {outcome}")
        check(world, oracle, done)
    return done


def sequence_dir(root: Path, n: int) -> str:
    return str(root / f"seq{n}" / "t")


# -- the generator ------------------------------------------------------------------------


def strategies(writers: tuple[str, ...], creators: tuple[str, ...], max_steps: int) -> Any:
    """A Hypothesis strategy of ``(shape, creator, steps)``."""
    from hypothesis import strategies as st

    @st.composite
    def batch(
        draw: Any, shape: Shape, size: int, avoid: frozenset[Any] = frozenset()
    ) -> tuple[Row, ...]:
        rows: dict[tuple[Any, ...], Row] = {}
        p_pool: list[Any] = list(P_VALUES[shape.p])
        if shape.null_safe or "p" not in shape.keys:
            p_pool.append(None)
        for _ in range(draw(st.integers(1, size))):
            row = {
                "p": draw(st.sampled_from(p_pool)),
                "k": draw(st.sampled_from(K_VALUES[shape.k])),
                "s": draw(st.sampled_from(S_VALUES)),
                "ts": draw(st.sampled_from(TS_VALUES)),
                "d": draw(st.sampled_from(D_VALUES)),
            }
            key = shape.key(row)
            if key not in avoid:
                rows.setdefault(key, row)  # one row per key in a batch
        return tuple(rows.values()) or (draw(st.just(row)),)

    @st.composite
    def step(draw: Any, shape: Shape) -> Step:
        writer = draw(st.sampled_from(writers))
        app = draw(st.sampled_from(APPS))
        if writer in ("embedded", "spark") and draw(st.booleans()):
            count = draw(st.integers(2, 3))  # pending versions, committed together
            return Step(writer, tuple(draw(batch(shape, 3)) for _ in range(count)), app)
        if writer == "auto_compact":
            first = draw(batch(shape, 3))
            keys = frozenset(shape.key(r) for r in first)
            second = draw(batch(shape, 3, keys))
            if any(shape.key(r) in keys for r in second):
                return Step("embedded", (first,), app)
            return Step(writer, (first, second), app)
        if writer in ("rs_optimize", "spark_optimize"):
            return Step(writer)
        return Step(writer, (draw(batch(shape, 3)),), app)

    @st.composite
    def sequence(draw: Any) -> tuple[Shape, str, list[Step]]:
        shape = Shape(
            p=draw(st.sampled_from(sorted(P_VALUES))),
            k=draw(st.sampled_from(sorted(K_VALUES))),
            keys=draw(st.sampled_from([("p", "k"), ("k",)])),
            null_safe=draw(st.booleans()),
        )
        creator = draw(st.sampled_from(creators))
        steps = [draw(step(shape)) for _ in range(draw(st.integers(1, max_steps)))]
        return shape, creator, steps

    return sequence()
