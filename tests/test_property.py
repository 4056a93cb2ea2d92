"""Property suite: generated histories against the independent oracle (tests/oracle.py).

Hypothesis draws a key type and a history of ``pre_commit`` / ``write`` / ``commit(n)``
/ ``abort`` / ``recover`` / a crash at a fault point followed by a new sink's
``recover`` / a replay of a committed version / a second app id writing to the same
target / a ``pre_commit`` of another schema (a column added, of one type or another,
or a column changing type: "mixed"). The history runs twice on real Delta tables, once
with coalesced commits and once one by one; after each run the target, the marker and
the pending versions must equal the oracle's. So coalesced = one by one =
crash-and-recover = the oracle. Every ``pre_commit`` the oracle refuses (accepted means
publishable) must raise ``SchemaMismatchError`` naming the column and stage nothing;
every one it accepts must be published by the commits that follow (a failing commit
fails the run).

Profiles: ``ci`` (default, bounded: about a minute) and ``long``
(``DELTASINK_HYPOTHESIS_PROFILE=long``, ``DELTASINK_PROPERTY_EXAMPLES`` examples per
shape; ``tools/property_run.py`` runs it and prints the figures).
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deltasink import DeltaSink, MergeSpec, SchemaMismatchError
from deltasink._faults import FaultInjected, armed
from deltasink.errors import DeltaSinkError, InvalidKeyError
from tests.oracle import Fold, Protocol, Row

settings.register_profile(
    "ci",
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "long",
    max_examples=int(os.environ.get("DELTASINK_PROPERTY_EXAMPLES", "250")),
    deadline=None,
    derandomize=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("DELTASINK_HYPOTHESIS_PROFILE", "ci"))

ROOT = Path(tempfile.mkdtemp(prefix="deltasink-property-"))

SHAPES: dict[str, dict[str, Any]] = {
    "upsert": {"mode": "upsert"},
    "insert": {"mode": "insert"},
    "append": {"mode": "append"},
    "upsert-sequence": {"mode": "upsert", "sequence_by": "seq"},
    "upsert-sequence-delete": {"mode": "upsert", "sequence_by": "seq", "delete_when": "op = 'D'"},
    "upsert-delete": {"mode": "upsert", "delete_when": "op = 'D'"},
    "insert-sequence": {"mode": "insert", "sequence_by": "seq"},
    "upsert-schema-evolution": {"mode": "upsert", "schema_evolution": True},
    "upsert-update-columns": {"mode": "upsert", "update_columns": ["v"]},
    "upsert-except-columns": {"mode": "upsert", "except_columns": ["v"]},
    "upsert-sequence-delete-update-columns": {
        "mode": "upsert",
        "sequence_by": "seq",
        "delete_when": "op = 'D'",
        "update_columns": ["w", "seq"],
    },
    "upsert-delete-absent": {"mode": "upsert", "when_not_matched_by_source": "delete"},
    "upsert-sequence-delete-absent-condition": {
        "mode": "upsert",
        "sequence_by": "seq",
        "delete_when": "op = 'D'",
        "when_not_matched_by_source": "delete",
        "not_matched_by_source_condition": "t.`v` >= 'b'",
    },
    "replace-by": {"mode": "replace", "replace_by": "keys"},  # the key columns
    "replace-by-where": {"mode": "replace", "replace_by": "keys", "replace_where": "v >= 'a'"},
    "replace-where": {"mode": "replace", "replace_where": "v >= 'a'"},
    # key index 0 has a null first key column (tests the null-safe match)
    "upsert-null-safe": {"mode": "upsert", "null_safe_keys": True},
    "insert-null-safe": {"mode": "insert", "null_safe_keys": True},
    # a pruning predicate every row satisfies (v is never null): same result
    "upsert-sequence-delete-target-predicate": {
        "mode": "upsert",
        "sequence_by": "seq",
        "delete_when": "op = 'D'",
        "target_predicate": "t.`v` IS NOT NULL",
    },
    # every row an event of its key at its sequence: (key, seq) unique per batch
    "scd2": {"mode": "scd2", "sequence_by": "seq"},
    "scd2-delete": {"mode": "scd2", "sequence_by": "seq", "delete_when": "op = 'D'"},
    "scd2-delete-schema-evolution": {
        "mode": "scd2",
        "sequence_by": "seq",
        "delete_when": "op = 'D'",
        "schema_evolution": True,
    },
    "upsert-sequence-delete-null-safe": {
        "mode": "upsert",
        "sequence_by": "seq",
        "delete_when": "op = 'D'",
        "null_safe_keys": True,
    },
}

#: Key types a ``replace_by`` column may have.
REPLACE_KINDS = ["composite", "date", "int64", "string"]

#: ``not_matched_by_source_condition``s of SHAPES, as the oracle's Python predicates.
CONDITIONS: dict[str | None, Callable[[Row], bool]] = {
    None: lambda row: True,
    "t.`v` >= 'b'": lambda row: row["v"] is not None and row["v"] >= "b",  # app b's rows
    "v >= 'a'": lambda row: row["v"] is not None and row["v"] >= "a",  # every row
}

T0 = dt.datetime(2024, 1, 1)
UTC = dt.timezone.utc
# Key types, each as (arrow types of the key columns, index -> key values). Close
# values on purpose: timestamps 300 µs apart (statistics keep milliseconds), strings
# sharing a 40-character prefix (statistics may keep a prefix).
KEY_TYPES: dict[str, tuple[list[pa.DataType], Callable[[int], list[Any]]]] = {
    "int64": ([pa.int64()], lambda i: [i]),
    "string": ([pa.string()], lambda i: ["p" * 40 + chr(97 + i)]),
    "timestamp-us": ([pa.timestamp("us")], lambda i: [T0 + dt.timedelta(microseconds=300 * i)]),
    "timestamp-utc": (
        [pa.timestamp("us", tz="UTC")],
        lambda i: [T0.replace(tzinfo=UTC) + dt.timedelta(microseconds=300 * i)],
    ),
    "date": ([pa.date32()], lambda i: [dt.date(2024, 1, 1) + dt.timedelta(days=i)]),
    "decimal": ([pa.decimal128(18, 3)], lambda i: [Decimal(i).scaleb(-3)]),
    "composite": ([pa.int64(), pa.string()], lambda i: [i % 2, "k" * 35 + str(i // 2)]),
    # index 2 is 0.0, written as -0.0 in every other row (Run.rows); index 5 is NaN in
    # rows of sequence 3, which a keyed mode refuses by name (InvalidKeyError)
    "float": ([pa.float64()], lambda i: [(i - 2) * 0.5]),
}
#: The "float" key type's indices of the signed zero and of the NaN.
FLOAT_ZERO, FLOAT_NAN = 2, 5

KEY_POOL = 6


def key_names(kind: str) -> list[str]:
    return ["k", "k2"][: len(KEY_TYPES[kind][0])]


@st.composite
def batches(draw: Any, shape: str, keyed_unique: bool) -> list[tuple[int, int, bool]]:
    """Rows as (key index, sequence, is delete)."""
    size = draw(st.integers(0, 4))
    if keyed_unique:
        keys = draw(
            st.lists(st.integers(0, KEY_POOL - 1), min_size=size, max_size=size, unique=True)
        )
    else:
        keys = draw(st.lists(st.integers(0, KEY_POOL - 1), min_size=size, max_size=size))
    deletes = "delete_when" in SHAPES[shape]
    if SHAPES[shape]["mode"] == "scd2":  # one event per key and sequence value
        pairs = draw(
            st.lists(
                st.tuples(st.integers(0, KEY_POOL - 1), st.integers(0, 3)),
                min_size=size,
                max_size=size,
                unique=True,
            )
        )
        return [(k, seq, deletes and draw(st.booleans())) for k, seq in pairs]
    return [(k, draw(st.integers(0, 3)), deletes and draw(st.booleans())) for k in keys]


OPS = ("stage", "write", "commit", "abort", "recover", "crash", "other", "replay", "mixed")
#: The schemas a "mixed" step stages, by its ``pick``: a column ``x`` added as a long or
#: as a string, the column ``v`` as a long instead of a string.
MIXED = ("x-long", "x-string", "v-long", "x-long")
POINTS = (
    "commit.before_publish",
    "publish.before_target_commit",
    "publish.after_target_commit",
    "commit.after_publish",
    "discard.before_log_commit",
)


@st.composite
def histories(draw: Any, shape: str) -> tuple[str, list[tuple[Any, ...]]]:
    mode = SHAPES[shape]["mode"]
    kind = draw(st.sampled_from(REPLACE_KINDS if mode == "replace" else sorted(KEY_TYPES)))
    unique = "sequence_by" not in SHAPES[shape] and mode not in ("append", "replace")
    steps = []
    for _ in range(draw(st.integers(2, 10))):
        op = draw(st.sampled_from(OPS))
        steps.append(
            (
                op,
                draw(batches(shape, unique)),
                draw(st.integers(0, 3)),
                draw(st.sampled_from(POINTS)),
            )
        )
    return kind, steps


def expect_refusal(call: Any, table: pa.Table, version: int, column: str | None, nan: bool) -> None:
    """``call(table, version)`` is refused by name, as the oracle says: a column that
    does not fit (SchemaMismatchError), a NaN key (InvalidKeyError), or either when
    the batch has both."""
    if column is not None and nan:
        with pytest.raises((SchemaMismatchError, InvalidKeyError)):
            call(table, version)
    elif column is not None:
        with pytest.raises(SchemaMismatchError, match=f"column '{column}'"):
            call(table, version)
    else:
        with pytest.raises(InvalidKeyError, match="is NaN"):
            call(table, version)


class Run:
    """One execution of a history against real tables, mirrored in the oracle."""

    def __init__(
        self, shape: str, kind: str, *, coalesce: bool, sink_kwargs: dict[str, Any] | None = None
    ) -> None:
        options = dict(SHAPES[shape])
        self.sink_kwargs = dict(sink_kwargs or {})
        self.shape = shape
        self.kind = kind
        self.evolve = bool(options.get("schema_evolution"))
        # partial updates: a second data column, so "not updated" is visible
        self.partial = "update_columns" in options or "except_columns" in options
        self.keys = key_names(kind)
        if options.get("replace_by") == "keys":
            options["replace_by"] = self.keys
        if options["mode"] not in ("append", "replace"):
            options["keys"] = self.keys
            # the histories send batches without a column a "mixed" version added
            options["allow_missing_columns"] = True
        self.spec = MergeSpec(**options)
        self.target = tempfile.mkdtemp(dir=ROOT) + "/target"
        self.coalesce = coalesce
        fold = Fold(
            options["mode"],
            tuple(self.keys),
            options.get("sequence_by"),
            "op" if "delete_when" in options else None,
            update_columns=_tuple(options.get("update_columns")),
            except_columns=_tuple(options.get("except_columns")),
            delete_absent=(
                CONDITIONS[options.get("not_matched_by_source_condition")]
                if options.get("when_not_matched_by_source") == "delete"
                else None
            ),
            replace_by=_tuple(options.get("replace_by")),
            replace_where=(
                CONDITIONS[options["replace_where"]] if "replace_where" in options else None
            ),
            history=self.spec.history if self.spec.mode == "scd2" else None,
            evolve=self.evolve,
        )
        self.models = {"a": Protocol(fold), "b": Protocol(fold)}
        self.fold = fold
        self.sinks = {app: self._sink(app) for app in self.models}
        self.next = {"a": 0, "b": 0}
        self.batches = 0

    def _sink(self, app: str) -> DeltaSink:
        return DeltaSink(self.target, app, self.spec, coalesce=self.coalesce, **self.sink_kwargs)

    def mixed(self, pick: int) -> str:
        """The schema variant a "mixed" step stages."""
        variant = MIXED[pick]
        if self.sink_kwargs.get("engine") == "spark":
            # The spark engine's staging table has one Delta schema: a type an aborted
            # version left there refuses another (DELTA_FAILED_TO_MERGE_FIELDS).
            return "x-long"
        options = SHAPES[self.shape]
        if variant == "v-long" and (
            "replace_where" in options or "not_matched_by_source_condition" in options
        ):
            return "x-string"  # those predicates compare v with strings
        return variant

    def rows(
        self, app: str, version: int, drawn: list[tuple[int, int, bool]], variant: str | None
    ) -> list[Row]:
        rows = []
        for i, (key, seq, delete) in enumerate(drawn):
            row: Row = dict(zip(self.keys, KEY_TYPES[self.kind][1](key), strict=True))
            if self.spec.null_safe_keys and key == 0:
                row[self.keys[0]] = None
            if self.kind == "float" and key == FLOAT_ZERO and (version + i) % 2:
                row["k"] = -0.0
            if self.kind == "float" and key == FLOAT_NAN and seq == 3:
                row["k"] = float("nan")
            row["v"] = f"{app}{version}.{i}"
            if self.partial:
                row["w"] = f"w{app}{version}.{i}"
            if self.spec.sequence_by:
                row["seq"] = seq
            if self.spec.delete_when:
                row["op"] = "D" if delete else "U"
            if self.evolve and self.batches >= 2:
                row["extra"] = seq * 10
            if variant == "x-long":
                row["x"] = i
            elif variant == "x-string":
                row["x"] = f"x{i}"
            elif variant == "v-long":
                row["v"] = i
            rows.append(row)
        return rows

    def table(self, rows: list[Row], variant: str | None) -> pa.Table:
        fields = [pa.field(k, t) for k, t in zip(self.keys, KEY_TYPES[self.kind][0], strict=True)]
        fields.append(pa.field("v", pa.int64() if variant == "v-long" else pa.string()))
        if self.partial:
            fields.append(pa.field("w", pa.string()))
        if self.spec.sequence_by:
            fields.append(pa.field("seq", pa.int64()))
        if self.spec.delete_when:
            fields.append(pa.field("op", pa.string()))
        if self.evolve and self.batches >= 2:
            fields.append(pa.field("extra", pa.int64()))
        if variant in ("x-long", "x-string"):
            fields.append(pa.field("x", pa.int64() if variant == "x-long" else pa.string()))
        schema = pa.schema(fields)
        return pa.Table.from_pylist(rows, schema=schema)

    def batch(
        self,
        app: str,
        version: int,
        drawn: list[tuple[int, int, bool]],
        variant: str | None = None,
    ) -> tuple[pa.Table, list[Row]]:
        rows = self.rows(app, version, drawn, variant)
        table = self.table(rows, variant)
        self.batches += 1
        return table, rows

    def step(self, op: str, drawn: list[tuple[int, int, bool]], pick: int, point: str) -> None:
        a, model = self.sinks["a"], self.models["a"]
        if op in ("stage", "write", "mixed"):
            version = self.next["a"]
            self.next["a"] += 1
            variant = self.mixed(pick) if op == "mixed" else None
            table, rows = self.batch("a", version, drawn, variant)
            types = column_types(table)
            refused = model.refuses(version, types)
            nan = model.refuses_key(version, rows)
            if refused is not None or nan:  # refused now, by name: nothing staged
                expect_refusal(
                    a.write if op == "write" else a.pre_commit, table, version, refused, nan
                )
                assert a.status().pending_versions == model.pending
                return
            if op == "write":
                a.write(table, version)
                model.write(version, rows, table.column_names, types)
            else:
                assert a.pre_commit(table, version).state == "staged"
                model.pre_commit(version, rows, table.column_names, types)
        elif op == "commit":
            upto = max(self.next["a"] - 1 - pick, 0)
            a.commit(upto)
            model.commit(upto)
        elif op == "abort":
            if model.pending:
                version = model.pending[-1]
                assert a.abort(version)
                model.abort(version)
        elif op == "recover":
            self.sinks["a"] = self._sink("a")  # a restart: a new sink object
            self.sinks["a"].recover()
            model.recover()
        elif op == "crash":
            try:
                with armed(point, "raise"):
                    a.commit(self.next["a"])
            except (FaultInjected, DeltaSinkError):
                pass
            self.sinks["a"] = self._sink("a")
            self.sinks["a"].recover()
            model.recover()
        elif op == "other":  # a second app id on the same target
            if self.fold.types is None and model.pending:
                # Not on a target app a's pending versions are to create: another writer
                # changing the target under pending versions is outside "accepted means
                # publishable" (docs/guarantees.md).
                return
            version = self.next["b"]
            self.next["b"] += 1
            table, rows = self.batch("b", version, drawn)
            types = column_types(table)
            refused = self.models["b"].refuses(version, types)
            nan = self.models["b"].refuses_key(version, rows)
            if refused is not None or nan:
                expect_refusal(self.sinks["b"].write, table, version, refused, nan)
                return
            self.sinks["b"].write(table, version)
            self.models["b"].write(version, rows, table.column_names, types)
        elif op == "replay" and model.committed is not None:
            version = max(model.committed - pick, 0)
            table, rows = self.batch("a", version, drawn)  # other rows, same version
            assert a.write(table, version).committed_versions == []
            model.write(version, rows, table.column_names)

    def check(self) -> None:
        actual = (
            DeltaTable(self.target).to_pyarrow_table().to_pylist()
            if self.fold.columns and _exists(self.target)
            else []
        )
        expected = self.fold.expected()
        assert sorted(map(_canon, actual)) == sorted(map(_canon, expected))
        for app, model in self.models.items():
            if model.committed is not None:
                assert DeltaTable(self.target).transaction_version(app) == model.committed
            assert self.sinks[app].status().pending_versions == model.pending


def column_types(table: pa.Table) -> dict[str, str]:
    """The oracle's view of a batch's schema: column -> its type's name."""
    return {f.name: str(f.type) for f in table.schema}


def _tuple(columns: list[str] | None) -> tuple[str, ...] | None:
    return None if columns is None else tuple(columns)


def _exists(target: str) -> bool:
    return Path(target, "_delta_log").is_dir()


def _canon(row: Row) -> str:
    def value(v: Any) -> Any:
        if isinstance(v, dt.datetime) and v.tzinfo is not None:
            return ("utc", v.astimezone(UTC).replace(tzinfo=None))
        return v

    return repr(sorted((k, value(v)) for k, v in row.items()))


def run_history(
    shape: str,
    kind: str,
    steps: list[tuple[Any, ...]],
    *,
    coalesce: bool,
    sink_kwargs: dict[str, Any] | None = None,
) -> Run:
    """Run ``steps`` (on the engine ``sink_kwargs`` picks), then check the oracle."""
    run = Run(shape, kind, coalesce=coalesce, sink_kwargs=sink_kwargs)
    for op, drawn, pick, point in steps:
        run.step(op, drawn, pick, point)
    run.sinks["a"].recover()
    run.models["a"].recover()
    run.check()
    return run


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_target_equals_the_oracle_coalesced_and_one_by_one(shape: str) -> None:
    @given(histories(shape))
    def check(history: tuple[str, list[tuple[Any, ...]]]) -> None:
        kind, steps = history
        coalesced = run_history(shape, kind, steps, coalesce=True)
        one_by_one = run_history(shape, kind, steps, coalesce=False)
        assert sorted(map(_canon, coalesced.fold.expected())) == sorted(
            map(_canon, one_by_one.fold.expected())
        )

    check()


# -- the defects, as fixed examples ------------------------------------------------


def test_defect_coalesced_sequence_and_deletes_equal_one_by_one() -> None:
    steps = [
        ("write", [(1, 1, False)], 0, POINTS[0]),
        ("stage", [(1, 3, True), (3, 3, True)], 0, POINTS[0]),
        ("stage", [(1, 2, False), (3, 2, False)], 0, POINTS[0]),
        ("commit", [], 0, POINTS[0]),
    ]
    for coalesce in (True, False):
        run = run_history("upsert-sequence-delete", "int64", steps, coalesce=coalesce)
        assert sorted(r["v"] for r in run.fold.expected()) == ["a2.0", "a2.1"]


@pytest.mark.parametrize("shape", ["upsert", "append", "scd2", "upsert-schema-evolution"])
def test_defect_mixed_schema_pending_versions_are_refused_or_published(shape: str) -> None:
    # On a new target, v0 pending defines the table: x as a long (v1), x as a string
    # (v2), v as a long (v3). Without evolution all three are refused at pre_commit;
    # with it v1 is accepted and published, v2 and v3 are refused. Coalesced and one by
    # one alike; nothing accepted fails to commit.
    steps = [
        ("stage", [(1, 1, False)], 0, POINTS[0]),
        ("mixed", [(2, 2, False)], 0, POINTS[0]),
        ("mixed", [(3, 3, False)], 1, POINTS[0]),
        ("mixed", [(4, 0, False)], 2, POINTS[0]),
        ("commit", [], 0, POINTS[0]),
    ]
    evolve = shape.endswith("evolution")
    for coalesce in (True, False):
        run = run_history(shape, "int64", steps, coalesce=coalesce)
        published = sorted((r["v"], r.get("x")) for r in run.fold.expected())
        assert published == ([("a0.0", None), ("a1.0", 0)] if evolve else [("a0.0", None)])
        assert DeltaTable(run.target).transaction_version("a") == (1 if evolve else 0)
        assert sorted(map(_canon, DeltaTable(run.target).to_pyarrow_table().to_pylist())) == (
            sorted(map(_canon, run.fold.expected()))
        )


@pytest.mark.parametrize("kind", ["timestamp-us", "timestamp-utc"])
@pytest.mark.parametrize("shape", ["upsert", "insert"])
def test_defect_sub_millisecond_timestamp_keys_never_duplicate(shape: str, kind: str) -> None:
    steps = [
        ("write", [(0, 0, False)], 0, POINTS[0]),
        ("write", [(3, 0, False)], 0, POINTS[0]),  # 900 µs: inside the same millisecond
        ("write", [(0, 0, False), (3, 0, False)], 0, POINTS[0]),
    ]
    run = run_history(shape, kind, steps, coalesce=True)
    assert len(run.fold.expected()) == 2


def test_a_null_sequence_value_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    from deltasink import KeyColumnError

    sink = DeltaSink(str(tmp_path / "t"), "a", MergeSpec(keys=["k"], sequence_by="seq"))
    with pytest.raises(KeyColumnError, match="sequence_by column 'seq' is null"):
        sink.write(pa.table({"k": [1], "seq": pa.array([None], pa.int64())}), 0)
    assert not _exists(str(tmp_path / "t"))


#: A history of the "float" key type: key 2 is written as 0.0 and as -0.0 (the sign
#: flips with the version and row), pending versions coalesce it, a crash and a second
#: app id touch it, and two batches with a NaN key (key 5 at sequence 3) are refused,
#: once with versions pending.
FLOAT_HISTORY: list[tuple[Any, ...]] = [
    ("stage", [(2, 0, False)], 0, POINTS[0]),  # v0: 0.0
    ("stage", [(2, 1, False), (1, 1, False)], 0, POINTS[0]),  # v1: -0.0
    ("write", [(5, 3, False), (0, 0, False)], 0, POINTS[0]),  # v2: NaN, refused
    ("commit", [], 0, POINTS[0]),  # v0 and v1, coalesced when allowed
    ("stage", [(0, 2, False), (2, 2, True)], 0, POINTS[0]),  # v3: -0.0
    ("crash", [], 0, "publish.after_target_commit"),
    ("other", [(2, 1, False)], 0, POINTS[0]),  # b's v0: 0.0
    ("stage", [(2, 3, False)], 0, POINTS[0]),  # v4: 0.0
    ("stage", [(3, 0, False), (2, 0, False)], 0, POINTS[0]),  # v5: -0.0
    ("stage", [(5, 3, False)], 0, POINTS[0]),  # v6: NaN, refused
    ("write", [(2, 1, True)], 0, POINTS[0]),  # v7: -0.0
]


@pytest.mark.parametrize(
    "shape",
    [
        "insert",
        "scd2-delete",
        "upsert",
        "upsert-null-safe",
        "upsert-sequence-delete",
        "upsert-sequence-delete-update-columns",
    ],
)
def test_signed_zero_and_nan_keys_equal_the_oracle(shape: str) -> None:
    """One rule for float keys in every mode and cadence: -0.0 is the key 0.0 (stored as
    0.0), a NaN key is refused by name. (``append`` has no keys and keeps both as data:
    the property test above draws the "float" key type for it too.)"""
    runs = [run_history(shape, "float", FLOAT_HISTORY, coalesce=c) for c in (True, False)]
    for run in runs:
        keys = [str(r["k"]) for r in DeltaTable(run.target).to_pyarrow_table().to_pylist()]
        assert "-0.0" not in keys
        assert "0.0" in keys
        assert "nan" not in keys
        if shape in ("insert", "upsert", "upsert-null-safe"):
            assert keys.count("0.0") == 1
    assert sorted(map(_canon, runs[0].fold.expected())) == sorted(
        map(_canon, runs[1].fold.expected())
    )
