"""Each performance optimisation, pinned by a test of its correctness."""

from __future__ import annotations

import datetime as dt
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from hypothesis import given, settings
from hypothesis import strategies as st

from deltasink import CommitError, DeltaSink, DuplicateKeyError, FencedError, MergeSpec, checks
from deltasink._faults import FaultInjected, armed
from deltasink.backends.deltalog import history as history_module
from deltasink.backends.deltalog.commits import post_commit_hooks
from deltasink.backends.deltalog.staging import StagingLog
from deltasink.backends.embedded.fencing import LOG_SETTINGS
from deltasink.backends.embedded.stage import StagingWriter
from deltasink.input.batch import prepare
from deltasink.input.keys import distinct_floats, distinct_ints
from deltasink.locations import normalize_uri
from deltasink.shapes.merge import key_ranges
from tests import support


def operations(target: str) -> list[str]:
    return [c["operation"] for c in reversed(DeltaTable(target).history())]


# -- pruning predicates -------------------------------------------------------------------


def test_key_ranges_render_literals_both_engines_parse() -> None:
    batch = pa.table(
        {
            "id": [5, 2, 9],
            "name": ["b'x", "a", "c"],
            "day": [dt.date(2024, 1, 3), dt.date(2024, 1, 1), dt.date(2024, 1, 2)],
            "score": [1.5, 2.5, 0.5],
        }
    )
    assert key_ranges(batch, ["id"]) == "t.`id` >= 2 AND t.`id` <= 9"
    assert key_ranges(batch, ["name"]) == "t.`name` >= 'a' AND t.`name` <= 'c'"
    assert key_ranges(batch, ["day"]) == (
        "t.`day` >= CAST('2024-01-01' AS DATE) AND t.`day` <= CAST('2024-01-03' AS DATE)"
    )
    assert key_ranges(batch, ["score"]) is None  # floats are not pruned on
    assert key_ranges(pa.table({"n": ["it's"]}), ["n"]) == "t.`n` >= 'it''s' AND t.`n` <= 'it''s'"


def test_pruned_merge_matches_rows_in_every_file(target: str) -> None:
    # a target of 4 files with interleaved key ranges; the batch touches all of them
    for part in range(4):
        ids = list(range(part, 40, 4))
        write_deltalake(target, pa.table({"id": ids, "v": ["old"] * len(ids)}), mode="append")
    sink = DeltaSink(target, "prune", MergeSpec(keys=["id"]))
    sink.write(pa.table({"id": [0, 13, 26, 39, 40], "v": ["new"] * 5}), 0)
    rows = {r["id"]: r["v"] for r in support.rows(target)}
    assert len(rows) == 41
    assert {k for k, v in rows.items() if v == "new"} == {0, 13, 26, 39, 40}


def test_pruned_merge_with_string_keys(target: str) -> None:
    write_deltalake(target, pa.table({"k": ["a", "m", "z"], "v": [1, 1, 1]}))
    DeltaSink(target, "prune", MergeSpec(keys=["k"])).write(
        pa.table({"k": ["m", "n"], "v": [2, 2]}), 0
    )
    assert support.rows(target, sort_by="k") == [
        {"k": "a", "v": 1},
        {"k": "m", "v": 2},
        {"k": "n", "v": 2},
        {"k": "z", "v": 1},
    ]


# -- duplicate-key check -------------------------------------------------------------------

INT_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint32(), pa.uint64()]


@st.composite
def int_columns(draw: st.DrawFn) -> pa.ChunkedArray:
    kind = draw(st.sampled_from(INT_TYPES))
    info = np.iinfo(kind.to_pandas_dtype())
    low = draw(st.integers(int(info.min), int(info.max)))
    width = draw(st.sampled_from([4, 50, 2_000, 1 << 40]))
    high = min(int(info.max), low + width)
    values = draw(st.lists(st.integers(low, high), max_size=60))
    if draw(st.booleans()):  # extremes of the type, where narrow arithmetic would wrap
        values += draw(st.lists(st.sampled_from([int(info.min), int(info.max)]), max_size=2))
    cut = draw(st.integers(0, len(values)))
    return pa.chunked_array([values[:cut], values[cut:]], type=kind)


@settings(max_examples=300, deadline=None)
@given(int_columns())
def test_the_bitmap_uniqueness_check_agrees_with_the_hash_aggregation(
    column: pa.ChunkedArray,
) -> None:
    # The fast twin decides only when it can, and then as the plain group-by does.
    verdict = distinct_ints(column)
    grouped = pa.table({"k": column}).group_by(["k"]).aggregate([([], "count_all")])
    assert verdict in (None, grouped.num_rows == len(column))
    values = column.to_pylist()
    if len(values) >= 2 and max(values) - min(values) < 16 * len(values):
        assert verdict is not None  # a compact range is always decided by the bitmap


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from([pa.float32(), pa.float64()]),
    st.lists(
        st.sampled_from([0.0, -0.0, 1.5, -1.5, 1e30, float("inf"), float("-inf")]), max_size=30
    ),
    st.lists(st.floats(allow_nan=True, width=32), max_size=30),
    st.booleans(),
)
def test_the_sorted_uniqueness_check_agrees_with_the_hash_aggregation(
    kind: pa.DataType, picked: list[float], drawn: list[float], with_null: bool
) -> None:
    # Keys as validation leaves them (normalise_keys: -0.0 is 0.0). The fast twin decides
    # only when it can (no nulls, no NaN), and then as the plain group-by does.
    values: list[float | None] = [0.0 if v == 0 else v for v in [*picked, *drawn]]
    values += [None] if with_null else []
    column = pa.chunked_array([values[:3], values[3:]], type=kind)
    verdict = distinct_floats(column)
    grouped = pa.table({"k": column}).group_by(["k"]).aggregate([([], "count_all")])
    if with_null or any(v != v for v in values if v is not None):
        assert verdict is None
    else:
        assert verdict == (grouped.num_rows == len(values))
        assert verdict == (len(set(column.to_pylist())) == len(values))


@st.composite
def keyed_tables(draw: st.DrawFn) -> tuple[pa.Table, list[str]]:
    """Rows with one or two keys (ints and strings, nulls and repeats), a sequence
    and a version column, in chunks."""
    n = draw(st.integers(0, 40))
    ints = st.one_of(st.none(), st.integers(-3, 3))
    strings = st.one_of(st.none(), st.sampled_from(["", "a", "b", "é", "a\x00"]))
    columns = {
        "a": pa.array(draw(st.lists(ints, min_size=n, max_size=n)), pa.int64()),
        "b": pa.array(draw(st.lists(strings, min_size=n, max_size=n)), pa.string()),
        "seq": pa.array(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), pa.int32()),
        "ver": pa.array(draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)), pa.int64()),
    }
    table = pa.table(columns)
    cut = draw(st.integers(0, n))
    table = pa.concat_tables([table.slice(0, cut), table.slice(cut)])
    keys = draw(st.sampled_from([["a"], ["b"], ["a", "b"], ["b", "a"]]))
    return table, keys


@settings(max_examples=300, deadline=None)
@given(keyed_tables(), st.sampled_from(["ascending", "descending"]))
def test_the_first_row_per_key_from_group_starts_agrees_with_the_hash_aggregation(
    case: tuple[pa.Table, list[str]], direction: str
) -> None:
    # The fast twin (group starts in the sorted rows) keeps exactly the rows the hash
    # aggregation keeps, nulls grouped with nulls, in the original order.
    from deltasink.input import keys as batch_module

    table, keys = case
    order: list[tuple[str, Any]] = [("seq", direction), ("ver", "descending")]
    fast = batch_module.first_per_key(table, keys, order)
    with mock.patch.object(batch_module, "_group_starts", return_value=None):
        grouped = batch_module.first_per_key(table, keys, order)
    assert fast.to_pylist() == grouped.to_pylist()
    distinct = {tuple(row[k] for k in keys) for row in table.to_pylist()}
    assert fast.num_rows == len(distinct)


@settings(max_examples=300, deadline=None)
@given(keyed_tables(), st.booleans())
def test_the_first_or_last_row_per_key_in_row_order_agrees_with_first_per_key(
    case: tuple[pa.Table, list[str]], last: bool
) -> None:
    # The coalescing fast path (one stable sort by the keys) keeps the rows the general
    # one keeps with the row order as the only order: ties to the later row for the
    # last, a row index ascending for the first.
    from deltasink.input import keys as batch_module

    table, keys = case
    fast = batch_module.edge_per_key(table, keys, last=last)
    if last:
        general = batch_module.first_per_key(table, keys, [])
    else:
        indexed = table.append_column("i", pa.array(range(table.num_rows), pa.int64()))
        general = batch_module.first_per_key(indexed, keys, [("i", "ascending")]).drop_columns(
            ["i"]
        )
    assert fast.to_pylist() == general.to_pylist()


def test_a_coalesced_upsert_keeps_each_key_s_latest_version_and_insert_its_earliest() -> None:
    from deltasink.core.coalesce import coalesce

    versions = [
        (3, pa.table({"id": [1, 2, None], "v": ["a3", "b3", "n3"]})),
        (4, pa.table({"id": [2, None, 5], "v": ["b4", "n4", "e4"]})),
        (7, pa.table({"id": [5, 1], "v": ["e7", "a7"]})),
    ]
    upsert = coalesce(versions, MergeSpec(keys=["id"]))
    insert = coalesce(versions, MergeSpec(keys=["id"], mode="insert"))
    assert sorted(upsert.to_pylist(), key=str) == sorted(
        [
            {"id": 2, "v": "b4"},
            {"id": None, "v": "n4"},
            {"id": 5, "v": "e7"},
            {"id": 1, "v": "a7"},
        ],
        key=str,
    )
    assert sorted(insert.to_pylist(), key=str) == sorted(
        [
            {"id": 1, "v": "a3"},
            {"id": 2, "v": "b3"},
            {"id": None, "v": "n3"},
            {"id": 5, "v": "e4"},
        ],
        key=str,
    )
    # Out of order (not a call the core makes) the general path decides the same.
    assert sorted(coalesce(versions[::-1], MergeSpec(keys=["id"])).to_pylist(), key=str) == (
        sorted(upsert.to_pylist(), key=str)
    )


def test_float_keys_take_the_hash_aggregation() -> None:
    from deltasink.input.keys import first_per_key

    nan = float("nan")
    table = pa.table({"k": [nan, 1.0, nan, 1.0], "v": [1, 2, 3, 4]})
    kept = first_per_key(table, ["k"], [("v", "descending")])
    assert kept.column("v").to_pylist() == [3, 4]  # one NaN key, as the grouping has it


def test_float_keys_take_the_general_path_for_the_first_or_last_row() -> None:
    from deltasink.input.keys import edge_per_key

    nan = float("nan")
    table = pa.table({"k": [nan, 1.0, nan, 1.0], "v": [1, 2, 3, 4]})
    assert edge_per_key(table, ["k"], last=True).column("v").to_pylist() == [3, 4]
    assert edge_per_key(table, ["k"], last=False).column("v").to_pylist() == [1, 2]


def test_duplicate_integer_keys_are_refused_with_the_usual_message() -> None:
    table = pa.table({"id": pa.array([5, 7, 5, 9], pa.int32()), "v": ["a", "b", "c", "d"]})
    with pytest.raises(DuplicateKeyError, match=r"1 key\(s\) appear more than once.*'id': 5"):
        prepare(table, MergeSpec(keys=["id"]), None, target="t")
    assert prepare(table.slice(1), MergeSpec(keys=["id"]), None, target="t").num_rows == 3


# -- insert-only fast path ------------------------------------------------------------------


def test_disjoint_keys_take_the_append_path(target: str) -> None:
    sink = DeltaSink(target, "fast", MergeSpec(keys=["id"]))
    sink.write(pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}), 0)
    report = sink.write(pa.table({"id": [10, 11], "v": ["x", "y"]}), 1)
    assert operations(target) == ["WRITE", "WRITE"]
    assert report.results[0].rows_inserted == 2
    assert support.ids(target) == [1, 2, 3, 10, 11]
    assert support.txn_commits(target, "fast") == {0: [0], 1: [1]}


def test_one_overlapping_key_forces_a_merge(target: str) -> None:
    sink = DeltaSink(target, "fast", MergeSpec(keys=["id"]))
    sink.write(pa.table({"id": [1, 5], "v": ["a", "b"]}), 0)
    sink.write(pa.table({"id": [3, 100], "v": ["c", "d"]}), 1)  # 3 lies inside [1, 5]
    assert operations(target) == ["WRITE", "MERGE"]
    sink.write(pa.table({"id": [5, 200], "v": ["B", "e"]}), 2)  # 5 exists
    assert operations(target)[-1] == "MERGE"
    assert support.rows(target) == [
        {"id": 1, "v": "a"},
        {"id": 3, "v": "c"},
        {"id": 5, "v": "B"},
        {"id": 100, "v": "d"},
        {"id": 200, "v": "e"},
    ]


def test_fast_path_drops_deletes_of_absent_keys(target: str) -> None:
    sink = DeltaSink(target, "fast", MergeSpec(keys=["id"], delete_when="op = 'D'"))
    sink.write(pa.table({"id": [1], "op": ["I"]}), 0)
    sink.write(pa.table({"id": [7, 8], "op": ["D", "I"]}), 1)
    assert operations(target)[-1] == "WRITE"
    assert support.rows(target) == [{"id": 1, "op": "I"}, {"id": 8, "op": "I"}]


def test_string_keys_never_take_the_fast_path(target: str) -> None:
    sink = DeltaSink(target, "fast", MergeSpec(keys=["k"]))
    sink.write(pa.table({"k": ["a"], "v": [1]}), 0)
    sink.write(pa.table({"k": ["b"], "v": [2]}), 1)
    assert operations(target) == ["WRITE", "MERGE"]


def test_insert_mode_fast_path_and_merge(target: str) -> None:
    sink = DeltaSink(target, "fast", MergeSpec(keys=["id"], mode="insert"))
    sink.write(pa.table({"id": [1], "v": ["first"]}), 0)
    sink.write(pa.table({"id": [1, 2], "v": ["second", "x"]}), 1)
    sink.write(pa.table({"id": [50], "v": ["y"]}), 2)
    assert operations(target) == ["WRITE", "MERGE", "WRITE"]
    assert support.rows(target) == [
        {"id": 1, "v": "first"},
        {"id": 2, "v": "x"},
        {"id": 50, "v": "y"},
    ]


# The fast path decides from file statistics alone, so it must be exact for the key type:
# every key type a user may have, with a batch whose keys exist in the target but hide from
# (or are indistinguishable in) the statistics. Each must end with one row per key.
US = dt.timedelta(microseconds=1)
UTC = dt.timezone.utc
T0 = dt.datetime(2024, 1, 1)
KEY_TYPES = {
    # statistics truncated to the millisecond: .000900 is above the file's max of .000
    "timestamp-us": (pa.timestamp("us"), [T0 + 100 * US, T0 + 900 * US], [T0 + 900 * US]),
    "timestamp-us-utc": (
        pa.timestamp("us", tz="UTC"),
        [T0.replace(tzinfo=UTC) + 100 * US],
        [T0.replace(tzinfo=UTC) + 100 * US, T0.replace(tzinfo=UTC) + 2 * dt.timedelta(days=1)],
    ),
    # before 1970 truncation goes the other way for negative epoch offsets
    "timestamp-before-1970": (
        pa.timestamp("us"),
        [dt.datetime(1969, 12, 31, 23, 59, 59, 999_100)],
        [dt.datetime(1969, 12, 31, 23, 59, 59, 999_100)],
    ),
    "timestamp-ns": (pa.timestamp("ns"), [1_000, 900_000], [900_000]),
    "date": (pa.date32(), [dt.date(2024, 1, 1)], [dt.date(2024, 1, 1), dt.date(2030, 1, 1)]),
    "decimal": (pa.decimal128(18, 3), [1, 2], [2]),
    "string-long-shared-prefix": (pa.string(), ["p" * 40 + "a"], ["p" * 40 + "a", "p" * 40 + "b"]),
    "binary": (pa.binary(), [b"a", b"b"], [b"b"]),
    "float-negative-zero": (pa.float64(), [0.0, 1.5], [-0.0]),
    "bool": (pa.bool_(), [True], [True, False]),
    "int8": (pa.int8(), [-128, 127], [127]),
}


@pytest.mark.parametrize("mode", ["upsert", "insert"])
@pytest.mark.parametrize("name", sorted(KEY_TYPES))
def test_statistics_never_let_an_existing_key_be_appended(
    target: str, name: str, mode: str
) -> None:
    kind, first, second = KEY_TYPES[name]
    spec = MergeSpec(keys=["k"], mode="insert" if mode == "insert" else "upsert")
    sink = DeltaSink(target, "fast", spec)
    sink.write(pa.table({"k": pa.array(first, kind), "v": [f"a{i}" for i in range(len(first))]}), 0)
    sink.write(pa.table({"k": pa.array(second, kind), "v": ["b"] * len(second)}), 1)
    keys = DeltaTable(target).to_pyarrow_table(columns=["k"]).column("k").to_pylist()
    expected = {*pa.array(first, kind).to_pylist(), *pa.array(second, kind).to_pylist()}
    assert sorted(keys, key=repr) == sorted(expected, key=repr)
    assert support.marker(target, "fast") == 1


def test_the_fast_path_still_applies_where_statistics_are_exact(target: str) -> None:
    sink = DeltaSink(target, "fast", MergeSpec(keys=["ts"]))
    sink.write(pa.table({"ts": pa.array([T0], pa.timestamp("us")), "v": [1]}), 0)
    later = T0 + dt.timedelta(milliseconds=2)  # beyond the 1 ms widening
    sink.write(pa.table({"ts": pa.array([later], pa.timestamp("us")), "v": [2]}), 1)
    close = T0 + dt.timedelta(microseconds=500)  # within it: statistics cannot tell
    sink.write(pa.table({"ts": pa.array([close], pa.timestamp("us")), "v": [3]}), 2)
    assert operations(target) == ["WRITE", "WRITE", "MERGE"]
    assert len(support.rows(target)) == 3


def test_a_file_without_key_statistics_forces_a_merge(target: str) -> None:
    write_deltalake(
        target,
        pa.table({"id": pa.array([1], pa.int64()), "v": ["a"]}),
        configuration={"delta.dataSkippingNumIndexedCols": "0"},
    )
    sink = DeltaSink(target, "fast", MergeSpec(keys=["id"]))
    sink.write(pa.table({"id": pa.array([1], pa.int64()), "v": ["b"]}), 0)
    assert operations(target)[-1] == "MERGE"
    assert support.rows(target) == [{"id": 1, "v": "b"}]


# -- no re-reading of data in memory -------------------------------------------------------


def test_write_publishes_the_batch_it_just_staged_without_reading_it_back(
    target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(self: StagingLog, version: int) -> pa.Table:
        raise AssertionError(f"version {version} was read back from staging")

    monkeypatch.setattr(StagingLog, "read", refuse)
    sink = DeltaSink(target, "memory", MergeSpec(keys=["id"]))
    sink.write(pa.table({"id": [1, 2], "v": ["a", "b"]}), 0)
    sink.write(pa.table({"id": [2, 3], "v": ["B", "c"]}), 1)
    assert support.rows(target) == [
        {"id": 1, "v": "a"},
        {"id": 2, "v": "B"},
        {"id": 3, "v": "c"},
    ]


# -- direct publish --------------------------------------------------------------------


def staging_operations(staging: str) -> list[str]:
    """The deltasink operation of every staging commit, oldest first."""
    found = []
    for _, actions in sorted(support.log_commits(staging).items()):
        info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        found.append(info.get("deltasink.operation") or info.get("operation"))
    return found


def test_write_with_nothing_staged_publishes_without_a_staging_write(target: str) -> None:
    sink = DeltaSink(target, "direct", MergeSpec(keys=["id"]))
    sink.write(pa.table({"id": [1, 2], "v": ["a", "b"]}), 0)
    report = sink.write(pa.table({"id": [2, 3], "v": ["B", "c"]}), 1)
    assert [(r.version, r.outcome, r.rows) for r in report.results] == [(1, "committed", 2)]
    assert report.cleaned_versions == ()
    assert support.rows(target) == [{"id": 1, "v": "a"}, {"id": 2, "v": "B"}, {"id": 3, "v": "c"}]
    assert {v: len(c) for v, c in support.txn_commits(target, "direct").items()} == {0: 1, 1: 1}
    # No staged data ever: each write is one publish intent (carrying the committed
    # mark of the write before) and the target commit; the staging log holds no data
    # file and no stage commit.
    assert support.staged_files_on_disk(sink.staging) == []
    assert all(
        "add" not in a and "remove" not in a
        for actions in support.log_commits(sink.staging).values()
        for a in actions
    )
    operations = staging_operations(sink.staging)
    assert "stage" not in operations
    assert operations[-3:] == ["claim-epoch", "publish-intent", "publish-intent"]
    assert DeltaTable(sink.staging).transaction_version("direct#publishing") == 1
    assert DeltaTable(sink.staging).transaction_version("direct#committed") == 0
    assert sink.status().committed_version == 1
    # A replay (the caller was not acknowledged) changes nothing.
    assert sink.write(pa.table({"id": [9], "v": ["x"]}), 1).results == ()
    assert support.table_version(target) == 1


def test_a_failed_direct_publish_is_staged_for_recover(target: str) -> None:
    sink = DeltaSink(target, "direct", MergeSpec(mode="append"))
    sink.write(pa.table({"id": [1]}), 0)
    with (
        armed("publish.before_target_commit", "raise"),
        pytest.raises(CommitError, match="version 1 is staged now") as info,
    ):
        sink.write(pa.table({"id": [2, 3]}), 1)
    assert info.value.version == 1
    assert isinstance(info.value.__cause__, FaultInjected)
    assert support.ids(target) == [1]
    assert support.staged_versions(sink.staging) == [1]
    assert sink.status().pending_versions == [1]
    assert DeltaSink(target, "direct").recover().committed_versions == [1]
    assert support.ids(target) == [1, 2, 3]
    assert support.staged_versions(sink.staging) == []


def test_a_batch_failing_its_check_in_write_is_staged_and_quarantined(target: str) -> None:
    sink = DeltaSink(target, "wap", MergeSpec(mode="append"), checks=[checks.no_nulls("id")])
    sink.write(pa.table({"id": [1]}), 0)
    report = sink.write(pa.table({"id": [2, None]}, schema=pa.schema([("id", pa.int64())])), 1)
    assert [(r.version, r.outcome) for r in report.results] == [(1, "quarantined")]
    assert support.ids(target) == [1]
    assert support.staged_versions(sink.staging) == [1]
    assert list(sink.status().quarantined) == [1]


class LogReads:
    """Counts reads of Delta logs (a table opened, or brought up to date) per table."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.counts: dict[str, int] = {}
        init, update = DeltaTable.__init__, DeltaTable.update_incremental

        def counted_init(table: DeltaTable, *args: Any, **kwargs: Any) -> None:
            init(table, *args, **kwargs)
            self._count(table)

        def counted_update(table: DeltaTable) -> None:
            update(table)
            self._count(table)

        monkeypatch.setattr(DeltaTable, "__init__", counted_init)
        monkeypatch.setattr(DeltaTable, "update_incremental", counted_update)

    def _count(self, table: DeltaTable) -> None:
        uri = table.table_uri.rstrip("/")
        self.counts[uri] = self.counts.get(uri, 0) + 1

    def of(self, uri: str) -> int:
        return sum(n for where, n in self.counts.items() if where.endswith(uri.rstrip("/")))


def test_a_direct_write_lists_neither_log_and_makes_one_staging_commit(
    target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = DeltaSink(target, "reads", MergeSpec(keys=["id"]))
    sink.write(pa.table({"id": [1], "v": ["a"]}), 0)  # creates both tables, claims
    staging_before = support.table_version(sink.staging)
    reads = LogReads(monkeypatch)
    for version in (1, 2, 3):
        reads.counts.clear()
        sink.write(pa.table({"id": [version], "v": ["b"]}), version)
        # Neither log is listed. The sink's own commits (the publish intent, the
        # MERGE) leave its table objects at the commits they made, so the state read
        # and the fencing check right before the target commit (which must see a claim
        # made after the intent) each find by one stat that no next commit file exists.
        assert (reads.of(sink.staging), reads.of(target)) == (0, 0), reads.counts
    assert support.table_version(sink.staging) == staging_before + 3  # the intents
    assert staging_operations(sink.staging)[-3:] == ["publish-intent"] * 3
    assert DeltaTable(sink.staging).transaction_version("reads#publishing") == 3
    # Each intent records the version committed before it.
    assert DeltaTable(sink.staging).transaction_version("reads#committed") == 2
    assert support.ids(target) == [1, 2, 3]


def test_a_target_moved_by_another_writer_is_read_again_before_the_merge(
    target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The stat that spares the listing must not hide another writer's commit: the
    # snapshot the MERGE runs on includes it, so its row survives and the marker moves.
    sink = DeltaSink(target, "job", MergeSpec(keys=["id"]))
    sink.write(pa.table({"id": [1], "v": ["a"]}), 0)
    write_deltalake(target, pa.table({"id": [2], "v": ["other"]}), mode="append")
    reads = LogReads(monkeypatch)
    sink.write(pa.table({"id": [2, 3], "v": ["b", "c"]}), 1)
    assert reads.of(target) == 1, reads.counts
    assert support.rows(target) == [
        {"id": 1, "v": "a"},
        {"id": 2, "v": "b"},
        {"id": 3, "v": "c"},
    ]
    assert support.marker(target, "job") == 1
    assert support.table_version(target) == 2


def after_intent(monkeypatch: pytest.MonkeyPatch, action: Callable[[], object]) -> None:
    """Run ``action`` right after each publish intent is recorded in the staging log."""
    record_intent = StagingWriter.record_intent

    def intent_then_action(writer: StagingWriter, *args: Any, **kwargs: Any) -> None:
        record_intent(writer, *args, **kwargs)
        action()

    monkeypatch.setattr(StagingWriter, "record_intent", intent_then_action)


def test_a_foreign_commit_after_the_intent_makes_the_fencing_check_read_the_log(
    target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The fencing check skips the listing only when no commit follows the sink's own
    # intent; any other commit after it, even one without data, sends it back to
    # reading the log.
    sink = DeltaSink(target, "job", MergeSpec(keys=["id"]))
    sink.write(pa.table({"id": [1], "v": ["a"]}), 0)
    other = DeltaTable(sink.staging)  # opened before the reads are counted

    def foreign_commit() -> None:
        other.create_write_transaction(
            [],
            mode="append",
            schema=other.schema(),
            partition_by=other.metadata().partition_columns,
            commit_properties=CommitProperties(app_transactions=[Transaction("someone", 7)]),
        )

    after_intent(monkeypatch, foreign_commit)
    reads = LogReads(monkeypatch)
    sink.write(pa.table({"id": [2], "v": ["b"]}), 1)
    assert reads.of(sink.staging) == 1, reads.counts  # the fencing check reads it
    assert support.ids(target) == [1, 2]
    assert support.marker(target, "job") == 1
    assert DeltaTable(sink.staging).transaction_version("someone") == 7


def test_a_claim_after_the_state_read_fences_the_direct_write_at_its_intent(
    target: str,
) -> None:
    # The epoch is checked on the state write() read at its start; a newer writer
    # claiming after that read makes the intent commit fail (a metadata change), and
    # the zombie stops before the target commit.
    old = DeltaSink(target, "job", MergeSpec(keys=["id"]))
    old.write(pa.table({"id": [1], "v": ["a"]}), 0)
    newer: list[DeltaSink] = []

    def newer_writer_claims() -> None:
        sink = DeltaSink(target, "job", MergeSpec(keys=["id"]))
        sink.recover()  # claims the writer role
        newer.append(sink)

    with (
        armed("commit.before_publish", newer_writer_claims),
        pytest.raises(FencedError, match="took over the staging table"),
    ):
        old.write(pa.table({"id": [2], "v": ["zombie"]}), 1)
    assert support.rows(target) == [{"id": 1, "v": "a"}]
    assert support.marker(target, "job") == 0
    assert DeltaTable(old.staging).transaction_version("job#publishing") == 0  # no intent
    # The newer writer carries on with the same version.
    assert newer[0].write(pa.table({"id": [2], "v": ["b"]}), 1).committed_versions == [1]
    assert support.rows(target) == [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}]


def test_a_claim_after_the_intent_fences_the_direct_write_before_the_target_commit(
    target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The check right before the target commit still reads the staging log.
    old = DeltaSink(target, "job", MergeSpec(keys=["id"]))
    old.write(pa.table({"id": [1], "v": ["a"]}), 0)
    after_intent(monkeypatch, lambda: DeltaSink(target, "job", MergeSpec(keys=["id"])).recover())
    with pytest.raises(FencedError, match="took over the staging table"):
        old.write(pa.table({"id": [2], "v": ["zombie"]}), 1)
    assert support.rows(target) == [{"id": 1, "v": "a"}]
    assert support.marker(target, "job") == 0


def test_write_behind_pending_versions_commits_them_with_it_in_one_commit(target: str) -> None:
    sink = DeltaSink(target, "behind", MergeSpec(keys=["id"]))
    sink.pre_commit(pa.table({"id": [1], "v": ["a"]}), 0)
    sink.pre_commit(pa.table({"id": [1, 2], "v": ["b", "b"]}), 1)
    report = sink.write(pa.table({"id": [2, 3], "v": ["c", "c"]}), 2)
    assert report.committed_versions == [0, 1, 2]
    assert support.rows(target) == [{"id": 1, "v": "b"}, {"id": 2, "v": "c"}, {"id": 3, "v": "c"}]
    assert support.txn_commits(target, "behind") == {2: [0]}  # one commit, highest marker
    assert support.commit_info(target, 0)["deltasink.versions"] == [0, 1, 2]
    assert support.staged_versions(sink.staging) == []


# -- coalesced commits ------------------------------------------------------------------


def random_batches(seed: int, spec: MergeSpec) -> list[pa.Table]:
    rng = random.Random(seed)
    batches = []
    for version in range(8):
        keys = rng.sample(range(30), rng.randint(0, 10))
        rows: dict[str, list[Any]] = {"id": keys, "v": [f"{version}-{k}" for k in keys]}
        if spec.sequence_by:
            rows["seq"] = [version * 100 + rng.randint(0, 99) for _ in keys]
        if spec.delete_when:
            rows["op"] = [rng.choice(["U", "U", "D"]) for _ in keys]
        batches.append(pa.table(rows, schema=schema_of(spec)))
    return batches


def schema_of(spec: MergeSpec) -> pa.Schema:
    fields = [pa.field("id", pa.int64()), pa.field("v", pa.string())]
    if spec.sequence_by:
        fields.append(pa.field("seq", pa.int64()))
    if spec.delete_when:
        fields.append(pa.field("op", pa.string()))
    return pa.schema(fields)


SPECS = {
    "upsert": MergeSpec(keys=["id"]),
    "upsert-seq": MergeSpec(keys=["id"], sequence_by="seq"),
    "upsert-delete": MergeSpec(keys=["id"], delete_when="op = 'D'"),
    "upsert-seq-delete": MergeSpec(keys=["id"], sequence_by="seq", delete_when="op = 'D'"),
    "insert": MergeSpec(keys=["id"], mode="insert"),
    "append": MergeSpec(mode="append"),
}


@pytest.mark.parametrize("name", list(SPECS))
@pytest.mark.parametrize("seed", [1, 2])
def test_coalesced_commit_equals_one_by_one(tmp_path: Path, name: str, seed: int) -> None:
    spec = SPECS[name]
    seed_rows = pa.table(
        {
            "id": list(range(0, 30, 3)),
            "v": ["seed"] * 10,
            **({"seq": [0] * 10} if spec.sequence_by else {}),
            **({"op": ["U"] * 10} if spec.delete_when else {}),
        },
        schema=schema_of(spec),
    )
    results = {}
    for coalesce in (True, False):
        target = str(tmp_path / f"t-{coalesce}")
        sink = DeltaSink(target, "eq", spec, coalesce=coalesce)
        sink.write(seed_rows, 0)
        for version, batch in enumerate(random_batches(seed, spec), start=1):
            sink.pre_commit(batch, version)
        report = sink.commit(8)
        assert report.committed_versions == list(range(1, 9))
        sort = ["id", "v"]
        results[coalesce] = (
            DeltaTable(target)
            .to_pyarrow_table()
            .sort_by([(c, "ascending") for c in sort])
            .to_pylist()
        )
        markers = support.txn_commits(target, "eq")
        if coalesce:
            assert sorted(markers) == [0, 8]  # one target commit, the highest marker
        else:
            assert sorted(markers) == list(range(9))
    assert results[True] == results[False]


def test_coalesced_commit_metadata_lists_every_version(target: str) -> None:
    sink = DeltaSink(target, "meta", MergeSpec(keys=["id"]))
    for version in range(3):
        sink.pre_commit(pa.table({"id": [version, 10 + version], "v": ["x", "y"]}), version)
    report = sink.commit(2)
    assert [r.versions for r in report.results] == [(0, 1, 2)]
    assert report.results[0].rows == 6
    info = support.commit_info(target, 0)
    assert info["deltasink.versions"] == [0, 1, 2]
    assert info["deltasink.batchVersion"] == 2
    text, _, cost = info["userMetadata"].partition(" deltasink=")
    assert text == "deltasink commit app=meta version=2 versions=0,1,2"
    assert json.loads(cost)["versions"] == [0, 1, 2]


def test_versions_with_different_columns_are_committed_one_by_one(target: str) -> None:
    sink = DeltaSink(target, "cols", MergeSpec(keys=["id"], allow_missing_columns=True))
    sink.write(pa.table({"id": [1], "a": ["a0"], "b": ["b0"]}), 0)
    sink.pre_commit(pa.table({"id": [1], "a": ["a1"]}), 1)  # leaves b alone
    sink.pre_commit(pa.table({"id": [1], "b": ["b2"]}), 2)  # leaves a alone
    report = sink.commit(2)
    assert [r.all_versions for r in report.results] == [(1,), (2,)]
    assert support.rows(target) == [{"id": 1, "a": "a1", "b": "b2"}]


def merge_predicate(target: str) -> str:
    return str(DeltaTable(target).history(1)[0]["operationParameters"]["mergePredicate"])


def test_pruning_is_used_only_when_it_skips_most_files(target: str) -> None:
    for part in range(4):  # four files holding ids 0-9, 10-19, 20-29, 30-39
        ids = list(range(part * 10, part * 10 + 10))
        write_deltalake(target, pa.table({"id": ids, "v": ["old"] * 10}), mode="append")
    sink = DeltaSink(target, "adaptive", MergeSpec(keys=["id"]))
    sink.write(pa.table({"id": [31, 35], "v": ["new", "new"]}), 0)  # one file of four
    assert "t.id >= 31 AND t.id <= 35" in merge_predicate(target)
    sink.write(pa.table({"id": [1, 38], "v": ["new", "new"]}), 1)  # spans all four files
    assert ">=" not in merge_predicate(target)
    assert {r["id"] for r in support.rows(target) if r["v"] == "new"} == {1, 31, 35, 38}


# -- post-commit hooks --------------------------------------------------------------------


def test_log_cleanup_runs_only_on_checkpoint_commits(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"id": [0]}), configuration={"delta.checkpointInterval": "4"})
    table = DeltaTable(uri)
    due = []
    for _ in range(8):
        due.append(post_commit_hooks(table).cleanup_expired_logs)
        write_deltalake(table, pa.table({"id": [1]}), mode="append")
        table.update_incremental()
    # the commit made at version v is checkpointed when (v + 1) % 4 == 0: v = 3, 7
    assert due == [False, False, True, False, False, False, True, False]
    assert sorted(p.name for p in (tmp_path / "t" / "_delta_log").glob("*.checkpoint.parquet")) == [
        f"{3:020d}.checkpoint.parquet",
        f"{7:020d}.checkpoint.parquet",
    ]
    table.alter.set_table_properties({"delta.enableExpiredLogCleanup": "false"})
    write_deltalake(table, pa.table({"id": [1]}), mode="append")
    table.update_incremental()  # version 10: the next commit is checkpointed, but no clean-up
    assert (table.version(), post_commit_hooks(table).cleanup_expired_logs) == (10, False)


def test_expired_logs_are_still_cleaned_around_checkpoints(target: str) -> None:
    write_deltalake(
        target,
        pa.table({"id": pa.array([], pa.int64()), "v": pa.array([], pa.string())}),
        configuration={
            "delta.checkpointInterval": "4",
            "delta.logRetentionDuration": "interval 0 seconds",
        },
    )
    sink = DeltaSink(target, "cleanup", MergeSpec(keys=["id"]))
    for version in range(9):  # target versions 1-9
        sink.write(pa.table({"id": [version % 3], "v": [f"v{version}"]}), version)
    log = sorted(p.name for p in (Path(target) / "_delta_log").iterdir())
    # clean-up ran with the checkpoint of version 7: every commit before it is gone
    assert log == sorted(
        [*(f"{v:020d}.json" for v in (7, 8, 9)), f"{7:020d}.checkpoint.parquet", "_last_checkpoint"]
    )
    assert support.rows(target) == [
        {"id": 0, "v": "v6"},
        {"id": 1, "v": "v7"},
        {"id": 2, "v": "v8"},
    ]
    assert support.marker(target, "cleanup") == 8


def test_the_staging_log_is_cleaned_around_its_checkpoints_by_direct_writes(
    target: str,
) -> None:
    """A direct write makes one staging commit (the intent, which carries the mark of
    the write before): the clean-up must still come with the commit that writes a
    checkpoint, so the staging log stays short."""
    sink = DeltaSink(target, "short", MergeSpec(keys=["id"]))
    sink.write(pa.table({"id": [0], "v": ["a"]}), 0)
    DeltaTable(sink.staging).alter.set_table_properties(
        {"delta.checkpointInterval": "4", "delta.logRetentionDuration": "interval 0 seconds"}
    )
    for version in range(1, 21):
        sink.write(pa.table({"id": [version % 3], "v": [f"v{version}"]}), version)
    log = Path(sink.staging) / "_delta_log"
    commits = sorted(int(p.name[:20]) for p in log.glob("*.json"))
    checkpoints = sorted(int(p.name[:20]) for p in log.glob("*.checkpoint.parquet"))
    assert checkpoints  # checkpoints were written ...
    assert commits[0] >= checkpoints[-1] - 4  # ... and the commits before them removed
    assert len(commits) <= 8
    assert DeltaTable(sink.staging).transaction_version("short#committed") == 19
    assert support.marker(target, "short") == 20


def test_the_staging_log_keeps_ten_minutes_and_older_tables_move_to_it(target: str) -> None:
    sink = DeltaSink(target, "job", MergeSpec(keys=["id"]))
    sink.write(pa.table({"id": [1], "v": ["a"]}), 0)
    config = DeltaTable(sink.staging).metadata().configuration
    assert {k: config[k] for k in LOG_SETTINGS} == LOG_SETTINGS
    # A staging table an earlier release made kept an hour: the next claim moves it.
    DeltaTable(sink.staging).alter.set_table_properties(
        {"delta.logRetentionDuration": "interval 1 hours"}
    )
    DeltaSink(target, "job", MergeSpec(keys=["id"])).recover()
    config = DeltaTable(sink.staging).metadata().configuration
    assert config["delta.logRetentionDuration"] == "interval 10 minutes"
    # A retention someone chose (or the spark engine's default) is left alone.
    DeltaTable(sink.staging).alter.set_table_properties(
        {"delta.logRetentionDuration": "interval 7 days"}
    )
    DeltaSink(target, "job", MergeSpec(keys=["id"])).recover()
    config = DeltaTable(sink.staging).metadata().configuration
    assert config["delta.logRetentionDuration"] == "interval 7 days"
    assert support.marker(target, "job") == 0


def _staged_files(target: str) -> dict[int, Path]:
    files = Path(target + "_deltasink_staging").rglob("*.parquet")
    return {int(f.parent.name.split("=")[1]): f for f in files}


def test_a_commit_takes_the_versions_this_sink_staged_from_memory(target: str) -> None:
    """The versions a sink pre-committed are committed from memory: with their staged
    files gone from storage, the commit still writes exactly their rows."""
    sink = DeltaSink(target, "cache", MergeSpec(keys=["id"]))
    for version in range(3):
        sink.pre_commit(pa.table({"id": [version, version + 1], "v": [f"v{version}"] * 2}), version)
    files = _staged_files(target)
    assert sorted(files) == [0, 1, 2]
    for path in files.values():
        path.unlink()
    report = sink.commit(2)
    assert report.committed_version == 2
    assert support.rows(target) == [
        {"id": 0, "v": "v0"},
        {"id": 1, "v": "v1"},
        {"id": 2, "v": "v2"},
        {"id": 3, "v": "v2"},
    ]
    assert support.marker(target, "cache") == 2


def test_versions_beyond_the_memory_budget_are_read_from_storage(
    target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the newest staged batch is kept when the budget is spent: the older ones
    are read back, so a lost file of one of them fails the commit, naming it."""
    from deltasink.backends.embedded import cache
    from deltasink.errors import StorageError

    monkeypatch.setattr(cache, "DEFAULT_BUDGET", 0)
    sink = DeltaSink(target, "cache", MergeSpec(keys=["id"]))
    for version in range(3):
        sink.pre_commit(pa.table({"id": [version], "v": [f"v{version}"]}), version)
    _staged_files(target)[0].unlink()
    with pytest.raises(CommitError, match=r"the staged data of version 0 .* cannot be read") as err:
        sink.commit(2)
    assert isinstance(err.value.__cause__, StorageError)
    assert not support.exists(target) or support.marker(target, "cache") is None


def test_the_staged_cache_keeps_the_newest_and_what_fits() -> None:
    from deltasink.backends.embedded.cache import StagedCache

    tables = {v: pa.table({"x": pa.array(range(1000), pa.int64())}) for v in range(4)}
    size = tables[0].nbytes
    kept = StagedCache(budget=2 * size)
    for version, table in tables.items():
        kept.put(version, table)
    assert [v for v in range(4) if v in kept] == [1, 2, 3]  # the newest plus two that fit
    kept.put(1, tables[1])  # re-staged: now the newest
    kept.put(4, pa.table({"x": pa.array(range(10_000), pa.int64())}))  # larger than the budget
    assert [v for v in range(5) if v in kept] == [1, 3, 4]
    kept.drop([3, 4])
    assert kept.get(1) is tables[1]
    assert kept.get(3) is None
    kept.clear()
    assert 1 not in kept


def test_the_target_history_is_read_only_for_an_intent_without_outcome(
    target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A direct write's outcome is its target marker (the next intent records it as the
    mark): steady writes never read the target's history. After a crash between the
    intent and the target commit, a new sink reads it once to settle that intent."""
    sink = DeltaSink(target, "hist", MergeSpec(keys=["id"]))
    sink.write(pa.table({"id": [1], "v": ["a"]}), 0)
    reads: list[tuple[str, int]] = []  # (table, commit) read as history
    read = history_module._read_local

    def counted(root: str, version: int) -> str | None:
        reads.append((root, version))
        return read(root, version)

    monkeypatch.setattr(history_module, "_read_local", counted)
    for version in (1, 2, 3):
        sink.write(pa.table({"id": [version], "v": ["b"]}), version)
    assert reads == []
    with armed("publish.before_target_commit", "raise"), pytest.raises(CommitError):
        sink.write(pa.table({"id": [4], "v": ["c"]}), 4)  # staged for recover()
    restarted = DeltaSink(target, "hist")
    assert restarted.status().committed_version == 3
    assert restarted.status().pending_versions == [4]
    # once, newest first: this app's newest commit (3) is the target's newest
    assert reads == [(normalize_uri(target), 3)]
    assert restarted.recover().committed_versions == [4]
    assert support.marker(target, "hist") == 4
