"""``MergeSpec(mode="scd2")``: the engine-free history rebuild against the oracle, the
spec's rules, and bad input. (The real-table runs: the property suite's ``scd2`` shapes,
the contract suite's ``test_scd2_*`` on both engines.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from hypothesis import given, settings
from hypothesis import strategies as st

from deltasink import DeltaSink, MergeSpec
from deltasink.errors import ConfigurationError, SchemaMismatchError
from deltasink.input.sql import DELETE_COLUMN
from deltasink.shapes.scd2 import changes
from tests.oracle import Fold

SPEC = MergeSpec(mode="scd2", keys=["k"], sequence_by="seq", delete_when="op = 'D'")
START, END, NOW = SPEC.history
SCHEMA = pa.schema(
    [("k", pa.int64()), ("v", pa.string()), ("seq", pa.int64()), ("op", pa.string())]
)
TARGET = pa.schema([*SCHEMA, (START, pa.int64()), (END, pa.int64()), (NOW, pa.bool_())])

events = st.lists(  # one batch: (key, sequence, is delete), unique (key, sequence)
    st.tuples(st.integers(0, 2), st.integers(0, 6), st.booleans()),
    max_size=6,
    unique_by=lambda e: (e[0], e[1]),
)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(events, min_size=1, max_size=6))
def test_applying_the_changes_rebuilds_the_oracles_history(batches: list[Any]) -> None:
    """A model target (rows by key and ``valid_from``) that applies each batch's
    changes as the MERGE does (delete flag: remove; else insert or replace) ends as the
    oracle's history, batch after batch. (Rows of the target's own events that keep
    their interval are left out of the changes; rows of the batch's events are always
    written, even when equal.)"""
    fold = Fold("scd2", ("k",), "seq", "op", history=SPEC.history)
    target: dict[tuple[int, int], dict[str, Any]] = {}
    for b, drawn in enumerate(batches):
        rows = [
            {"k": k, "v": f"b{b}.{i}", "seq": s, "op": "D" if d else "U"}
            for i, (k, s, d) in enumerate(drawn)
        ]
        fold.apply(rows)
        batch = pa.Table.from_pylist(rows, schema=SCHEMA)
        batch = batch.append_column(
            DELETE_COLUMN, pa.array([r["op"] == "D" for r in rows], pa.bool_())
        )
        current = pa.Table.from_pylist(list(target.values()), schema=TARGET) if target else None
        for row in changes(current, batch, SPEC).to_pylist():
            where = (row["k"], row[START])
            if row.pop(DELETE_COLUMN):
                assert where in target  # only rows that exist are removed
                del target[where]
            else:
                target[where] = row
        expected = sorted(repr(sorted(r.items())) for r in fold.expected())
        assert sorted(repr(sorted(r.items())) for r in target.values()) == expected


def test_only_rows_whose_interval_changes_are_merged() -> None:
    spec = MergeSpec(mode="scd2", keys=["k"], sequence_by="seq")
    first = changes(None, pa.table({"k": [1, 1], "v": ["a", "b"], "seq": [1, 2]}), spec)
    assert first.column(END).to_pylist() == [2, None]
    current = first.drop_columns([DELETE_COLUMN])
    later = changes(current, pa.table({"k": [1], "v": ["c"], "seq": [3]}), spec)
    # the row from 1 keeps its interval: not rewritten
    rows = later.select(["v", START, END, NOW, DELETE_COLUMN]).to_pylist()
    assert sorted(rows, key=lambda r: r[START]) == [
        {"v": "b", START: 2, END: 3, NOW: False, DELETE_COLUMN: False},
        {"v": "c", START: 3, END: None, NOW: True, DELETE_COLUMN: False},
    ]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"keys": ["k"]}, "needs sequence_by"),
        ({"sequence_by": "s"}, "needs keys"),
        ({"keys": ["k"], "sequence_by": "s", "null_safe_keys": True}, "no null_safe_keys"),
        ({"keys": ["k"], "sequence_by": "s", "history_columns": ["a", "b"]}, "three distinct"),
        ({"keys": ["k"], "sequence_by": "s", "history_columns": ["a", "a", "b"]}, "distinct"),
        ({"keys": ["k"], "sequence_by": "s", "history_columns": ["k", "b", "c"]}, "name a key"),
        ({"keys": ["k"], "sequence_by": "s", "update_columns": ["v"]}, "only valid with"),
        (
            {"keys": ["k"], "sequence_by": "s", "when_not_matched_by_source": "delete"},
            "only valid with",
        ),
    ],
)
def test_bad_scd2_specs_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        MergeSpec(mode="scd2", **kwargs)


def test_history_columns_only_with_scd2_and_round_trip_through_json() -> None:
    with pytest.raises(ConfigurationError, match="only valid with mode='scd2'"):
        MergeSpec(keys=["k"], history_columns=["a", "b", "c"])
    spec = MergeSpec(
        mode="scd2", keys=["k"], sequence_by="s", history_columns=["from", "to", "now"]
    )
    assert spec.history == ("from", "to", "now")
    assert MergeSpec.from_json(spec.to_json()) == spec
    assert MergeSpec(mode="scd2", keys=["k"], sequence_by="s").history == (
        "valid_from",
        "valid_to",
        "is_current",
    )


def test_a_batch_with_a_history_column_is_refused_before_writing(tmp_path: Path) -> None:
    target = str(tmp_path / "t")
    sink = DeltaSink(target, "a", MergeSpec(mode="scd2", keys=["k"], sequence_by="s"))
    with pytest.raises(SchemaMismatchError, match=r"\['is_current'\], which MergeSpec"):
        sink.write(pa.table({"k": [1], "s": [1], "is_current": [True]}), 0)
    assert not Path(target).exists()


def test_custom_history_columns_and_timestamps(tmp_path: Path) -> None:
    import datetime as dt

    target = str(tmp_path / "t")
    spec = MergeSpec(
        mode="scd2",
        keys=["id"],
        sequence_by="at",
        history_columns=["__START_AT", "__END_AT", "__CURRENT"],
    )
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    sink = DeltaSink(target, "a", spec)
    sink.write(pa.table({"id": [1], "name": ["x"], "at": [t0]}), 0)
    sink.write(pa.table({"id": [1], "name": ["y"], "at": [t0 + dt.timedelta(hours=1)]}), 1)
    rows = DeltaTable(target).to_pyarrow_table().sort_by("__START_AT").to_pylist()
    assert [(r["name"], r["__START_AT"], r["__END_AT"], r["__CURRENT"]) for r in rows] == [
        ("x", t0, t0 + dt.timedelta(hours=1), False),
        ("y", t0 + dt.timedelta(hours=1), None, True),
    ]


def test_a_target_key_of_minus_zero_is_the_batch_key_zero(tmp_path: Path) -> None:
    """A history row written outside deltasink with the key -0.0 is the key 0.0 of a
    later event: its interval ends there, and the key keeps one current row."""
    from deltalake import write_deltalake

    target = str(tmp_path / "t")
    spec = MergeSpec(mode="scd2", keys=["k"], sequence_by="seq")
    old = pa.table(
        {
            "k": pa.array([-0.0], pa.float64()),
            "v": ["a"],
            "seq": pa.array([1], pa.int64()),
            START: pa.array([1], pa.int64()),
            END: pa.array([None], pa.int64()),
            NOW: [True],
        }
    )
    write_deltalake(target, old)
    batch = pa.table({"k": pa.array([0.0], pa.float64()), "v": ["b"], "seq": [2]})
    DeltaSink(target, "a", spec).write(batch, 0)
    rows = sorted(DeltaTable(target).to_pyarrow_table().to_pylist(), key=lambda r: r["seq"])
    assert [(r["v"], r[START], r[END], r[NOW]) for r in rows] == [
        ("a", 1, 2, False),
        ("b", 2, None, True),
    ]
    assert DeltaTable(target).transaction_version("a") == 0
