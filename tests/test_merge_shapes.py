"""MergeSpec shapes beyond the basic modes: validation, the JSON recorded in the staging
table (old records still load), the compiled MERGE, and fixed examples on real Delta
tables (embedded engine; both engines run the contract tests in tests/contract.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from deltasink import ConfigurationError, DeltaSink, MergeSpec
from deltasink.shapes.merge import compile_merge
from deltasink.shapes.target_sql import TargetSql
from tests import support

#: A delta-rs statement over no known target columns.
DELTA_RS = TargetSql("delta-rs")

# -- update_columns / except_columns -------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"keys": ["id"], "update_columns": ["a"], "except_columns": ["b"]},
            "not both",
        ),
        ({"keys": ["id"], "update_columns": ["id", "a"]}, r"names the key column\(s\) \['id'\]"),
        ({"keys": ["id"], "except_columns": ["id"]}, r"names the key column\(s\) \['id'\]"),
        (
            {"keys": ["id"], "mode": "insert", "update_columns": ["a"]},
            "only valid with mode='upsert'",
        ),
        ({"mode": "append", "except_columns": ["a"]}, "only valid with mode='upsert'"),
        ({"keys": ["id"], "update_columns": []}, "is empty"),
        ({"keys": ["id"], "update_columns": ["a", "a"]}, "duplicates"),
        ({"keys": ["id"], "update_columns": [""]}, "non-empty strings"),
        ({"keys": ["id"], "except_columns": ["_deltasink_x"]}, "reserved prefix"),
        (
            {"keys": ["id"], "sequence_by": "ts", "update_columns": ["a"]},
            "must include sequence_by='ts'",
        ),
        (
            {"keys": ["id"], "sequence_by": "ts", "except_columns": ["ts"]},
            "must not include sequence_by='ts'",
        ),
    ],
)
def test_bad_partial_update_specs_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        MergeSpec(**kwargs)


def test_partial_update_specs_round_trip_through_json_and_old_records_load() -> None:
    for spec in (
        MergeSpec(keys=["id"], update_columns="a"),
        MergeSpec(keys=["id"], sequence_by="ts", update_columns=["a", "ts"], delete_when="x"),
        MergeSpec(keys=["id"], except_columns=["b", "c"]),
    ):
        assert MergeSpec.from_json(spec.to_json()) == spec
        assert not spec.coalescable
    plain = MergeSpec(keys=["id"])
    # a record written before these fields existed has no such keys, and still loads
    old = '{"delete_when": null, "keys": ["id"], "mode": "upsert", "schema_evolution": false, "sequence_by": null}'
    assert MergeSpec.from_json(old) == plain
    assert "update_columns" not in json.loads(plain.to_json())
    assert plain.coalescable
    assert MergeSpec(keys=["id"], update_columns="a").update_columns == ("a",)


def test_the_merge_updates_only_the_listed_columns_and_inserts_all() -> None:
    columns = ["id", "a", "b", "c"]
    only = compile_merge(
        MergeSpec(keys=["id"], update_columns=["b"]), columns, has_delete=False, sql=DELTA_RS
    )
    assert only.update_columns == ("b",)
    assert only.insert_columns == ("id", "a", "b", "c")
    but = compile_merge(
        MergeSpec(keys=["id"], except_columns=["b"]), columns, has_delete=False, sql=DELTA_RS
    )
    assert but.update_columns == ("a", "c")
    sql = but.to_sql("tgt", "src")
    assert "UPDATE SET t.`a` = s.`a`, t.`c` = s.`c`" in sql
    assert "INSERT (`id`, `a`, `b`, `c`)" in sql


def _rows(*rows: tuple[int, str, str]) -> pa.Table:
    return pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "a": pa.array([r[1] for r in rows], pa.string()),
            "b": pa.array([r[2] for r in rows], pa.string()),
        }
    )


@pytest.mark.parametrize("coalesce", [True, False])
def test_pending_partial_updates_equal_one_by_one(tmp_path: Path, coalesce: bool) -> None:
    """A key inserted by v1 and updated by v2 keeps v1's non-updated columns, whether
    the sink may coalesce or not (it does not coalesce such specs)."""
    target = str(tmp_path / "t")
    spec = MergeSpec(keys=["id"], update_columns=["a"])
    sink = DeltaSink(target, "app", spec, coalesce=coalesce)
    sink.pre_commit(_rows((1, "a1", "b1")), 1)
    sink.pre_commit(_rows((1, "a2", "b2"), (2, "a2", "b2")), 2)
    sink.pre_commit(_rows((2, "a3", "b3")), 3)
    report = sink.commit(3)
    assert report.committed_versions == [1, 2, 3]
    assert all(len(r.all_versions) == 1 for r in report.results)
    assert support.rows(target) == [
        {"id": 1, "a": "a2", "b": "b1"},
        {"id": 2, "a": "a3", "b": "b2"},
    ]
    assert sorted(support.txn_commits(target, "app")) == [1, 2, 3]


def test_the_partial_update_spec_is_recorded_in_the_staging_table(tmp_path: Path) -> None:
    target = str(tmp_path / "t")
    spec = MergeSpec(keys=["id"], except_columns=["b"])
    DeltaSink(target, "app", spec).pre_commit(_rows((1, "a", "b")), 0)
    operator = DeltaSink(target, "app")  # what `deltasink recover` builds
    assert operator.recover().committed_versions == [0]
    assert DeltaTable(target).transaction_version("app") == 0
    # the recorded spec governs the next version too: b is left alone
    operator.write(_rows((1, "x", "y")), 1)
    assert support.rows(target) == [{"id": 1, "a": "x", "b": "b"}]


# -- when_not_matched_by_source="delete" ---------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"keys": ["id"], "when_not_matched_by_source": "drop"}, "must be one of"),
        (
            {"keys": ["id"], "mode": "insert", "when_not_matched_by_source": "delete"},
            "only valid with mode='upsert'",
        ),
        (
            {"mode": "append", "when_not_matched_by_source": "delete"},
            "only valid with mode='upsert'",
        ),
        (
            {"keys": ["id"], "not_matched_by_source_condition": "t.a = 1"},
            "needs when_not_matched_by_source='delete'",
        ),
        (
            {
                "keys": ["id"],
                "when_not_matched_by_source": "delete",
                "not_matched_by_source_condition": " ",
            },
            "non-empty SQL predicate",
        ),
    ],
)
def test_bad_not_matched_by_source_specs_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        MergeSpec(**kwargs)


def test_not_matched_by_source_round_trips_and_is_neither_coalesced_nor_pruned() -> None:
    spec = MergeSpec(
        keys=["id"], when_not_matched_by_source="delete", not_matched_by_source_condition="t.a > 1"
    )
    assert MergeSpec.from_json(spec.to_json()) == spec
    assert not spec.coalescable
    assert not spec.prunable
    plan = compile_merge(spec, ["id", "a"], has_delete=False, sql=TargetSql("spark"))
    assert plan.to_sql("tgt", "src").endswith(
        "WHEN NOT MATCHED BY SOURCE AND (t.a > 1) THEN DELETE"
    )
    target = pa.schema([("id", pa.int64()), ("a", pa.int32())])
    plan = compile_merge(
        spec, ["id", "a"], has_delete=False, sql=TargetSql.over("delta-rs", target)
    )
    assert plan.clauses[-1].condition == "(t.`a` > CAST(1 AS INT))"
    with pytest.raises(ValueError, match="cannot be pruned"):
        compile_merge(spec, ["id", "a"], has_delete=False, sql=DELTA_RS, prune="t.`id` >= 1")


def _ids(*ids: int) -> pa.Table:
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "a": pa.array([f"a{i}" for i in ids], pa.string())}
    )


@pytest.mark.parametrize("direct", [True, False])
def test_rows_outside_the_batchs_key_range_are_deleted_too(tmp_path: Path, direct: bool) -> None:
    """The batch's keys lie outside every target file's key range: neither the
    insert-only fast path nor key-range pruning may skip the deletes."""
    target = str(tmp_path / "t")
    spec = MergeSpec(keys=["id"], when_not_matched_by_source="delete")
    sink = DeltaSink(target, "app", spec)
    for version, ids in enumerate([(1, 2), (3, 4)]):  # two versions: rows 3, 4 survive
        sink.write(_ids(*ids), version)
    assert [r["id"] for r in support.rows(target)] == [3, 4]
    DeltaSink(target, "other", MergeSpec(keys=["id"])).write(_ids(*range(5, 40)), 0)
    if direct:
        sink.write(_ids(100, 101), 2)
    else:
        sink.pre_commit(_ids(100, 101), 2)
        sink.commit(2)
    assert [r["id"] for r in support.rows(target)] == [100, 101]
    assert DeltaTable(target).transaction_version("app") == 2
    sink.write(_ids(), 3)  # an empty batch deletes every row
    assert support.rows(target) == []
    assert DeltaTable(target).transaction_version("app") == 3


def test_pending_versions_each_define_the_survivors(tmp_path: Path) -> None:
    target = str(tmp_path / "t")
    spec = MergeSpec(
        keys=["id"],
        when_not_matched_by_source="delete",
        not_matched_by_source_condition="t.id < 10",
    )
    sink = DeltaSink(target, "app", spec)
    sink.write(_ids(1, 2, 3, 11, 12), 0)
    sink.pre_commit(_ids(1, 2, 4), 1)
    sink.pre_commit(_ids(2, 5), 2)
    report = sink.commit(2)
    assert report.committed_versions == [1, 2]
    assert all(len(r.all_versions) == 1 for r in report.results)
    # v1 deletes 3; v2 deletes 1 and 4 (each version alone); 11, 12 fail the condition
    assert [r["id"] for r in support.rows(target)] == [2, 5, 11, 12]


# -- mode="replace" -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "replace"}, "needs replace_by"),
        ({"mode": "replace", "keys": ["id"], "replace_by": ["d"]}, "takes no keys"),
        ({"mode": "replace", "replace_by": ["d"], "sequence_by": "s"}, "takes no keys"),
        ({"mode": "replace", "replace_by": []}, "replace_by is empty"),
        ({"mode": "replace", "replace_by": ["d", "d"]}, "duplicates"),
        ({"mode": "replace", "replace_where": " "}, "non-empty SQL predicate"),
        ({"keys": ["id"], "replace_by": ["d"]}, "only valid with mode='replace'"),
        ({"mode": "append", "replace_where": "d = 1"}, "only valid with mode='replace'"),
        (
            {"mode": "replace", "replace_by": ["d"], "when_not_matched_by_source": "delete"},
            "only valid with mode='upsert'",
        ),
        ({"mode": "replace", "replace_by": ["d"], "update_columns": ["x"]}, "mode='upsert'"),
    ],
)
def test_bad_replace_specs_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        MergeSpec(**kwargs)


def test_replace_specs_round_trip_and_are_not_coalesced() -> None:
    for spec in (
        MergeSpec(mode="replace", replace_by="day"),
        MergeSpec(mode="replace", replace_by=["day", "region"], replace_where="region = 'EU'"),
        MergeSpec(mode="replace", replace_where="day >= '2024-01-01'"),
    ):
        assert MergeSpec.from_json(spec.to_json()) == spec
        assert not spec.coalescable
    with pytest.raises(ValueError, match="not a MERGE"):
        compile_merge(
            MergeSpec(mode="replace", replace_by="d"), ["d"], has_delete=False, sql=DELTA_RS
        )


def test_replace_predicates_quote_values_for_each_engine() -> None:
    import datetime as dt

    from deltasink.shapes.merge import replace_predicate

    spec = MergeSpec(mode="replace", replace_by=["d", "s"], replace_where="n > 1")
    values = pa.table({"d": [dt.date(2024, 1, 2)] * 2, "s": ["it's", "it's"], "n": [2, 3]})
    assert replace_predicate(spec, values, sql=TargetSql.over("delta-rs", values.schema)) == (
        "((`n` > CAST(1 AS BIGINT))) AND ((`d` = CAST('2024-01-02' AS DATE) AND `s` = 'it''s'))"
    )
    assert "`s` = 'it\\'s'" in (replace_predicate(spec, values, sql=TargetSql("spark")) or "")
    assert (
        replace_predicate(spec, values.slice(0, 0), sql=TargetSql.over("delta-rs", values.schema))
        is None
    )  # replaces nothing


def test_replace_by_columns_must_be_present_non_null_scalars(tmp_path: Path) -> None:
    from deltasink import KeyColumnError

    target = str(tmp_path / "t")
    sink = DeltaSink(target, "app", MergeSpec(mode="replace", replace_by=["d"]))
    for batch, message in [
        (pa.table({"x": [1]}), "replace_by column 'd' is missing"),
        (pa.table({"d": pa.array([None, 1], pa.int64())}), "replace_by column 'd' is null"),
        (pa.table({"d": [1.5]}), "integers, strings or dates"),
    ]:
        with pytest.raises(KeyColumnError, match=message):
            sink.write(batch, 0)
    assert not support.exists(target)


@pytest.mark.parametrize("direct", [True, False])
def test_pending_replace_versions_equal_one_by_one(tmp_path: Path, direct: bool) -> None:
    """Per replace_by value the latest version carrying it wins."""
    target = str(tmp_path / "t")
    sink = DeltaSink(target, "app", MergeSpec(mode="replace", replace_by=["d"]))
    day = pa.table
    sink.write(day({"d": [1, 1, 2], "v": ["a", "b", "c"]}), 0)
    batches = [day({"d": [1], "v": ["x"]}), day({"d": [2, 1], "v": ["y", "z"]})]
    if direct:
        for version, batch in enumerate(batches, start=1):
            sink.write(batch, version)
    else:
        for version, batch in enumerate(batches, start=1):
            sink.pre_commit(batch, version)
        report = sink.commit(2)
        assert all(len(r.all_versions) == 1 for r in report.results)
    rows = sorted((r["d"], r["v"]) for r in support.rows(target, sort_by="d"))
    assert rows == [(1, "z"), (2, "y")]
    assert sorted(support.txn_commits(target, "app")) == [0, 1, 2]


# -- null_safe_keys -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "append", "null_safe_keys": True}, "needs keys"),
        ({"mode": "replace", "replace_by": ["d"], "null_safe_keys": True}, "needs keys"),
        ({"keys": ["id"], "null_safe_keys": "yes"}, "True or False"),
    ],
)
def test_bad_null_safe_specs_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        MergeSpec(**kwargs)


def test_null_safe_keys_round_trip_join_null_safely_and_are_not_pruned() -> None:
    spec = MergeSpec(keys=["a", "b"], null_safe_keys=True, mode="insert")
    assert MergeSpec.from_json(spec.to_json()) == spec
    assert "null_safe_keys" not in json.loads(MergeSpec(keys=["a"]).to_json())
    assert spec.coalescable
    assert not spec.prunable
    plan = compile_merge(spec, ["a", "b", "v"], has_delete=False, sql=DELTA_RS)
    assert plan.on == ("(t.`a` IS NOT DISTINCT FROM s.`a`) AND (t.`b` IS NOT DISTINCT FROM s.`b`)")


def test_null_sequence_values_stay_refused_with_null_safe_keys(tmp_path: Path) -> None:
    from deltasink import KeyColumnError

    target = str(tmp_path / "t")
    sink = DeltaSink(target, "app", MergeSpec(keys=["k"], sequence_by="s", null_safe_keys=True))
    batch = pa.table({"k": pa.array([None], pa.int64()), "s": pa.array([None], pa.int64())})
    with pytest.raises(KeyColumnError, match="sequence_by column 's' is null"):
        sink.write(batch, 0)
    assert not support.exists(target)


def test_null_keys_outside_every_files_range_still_match(tmp_path: Path) -> None:
    """The insert-only fast path and key-range pruning would miss a null key's
    target row (statistics say nothing about nulls): both are off."""
    target = str(tmp_path / "t")
    sink = DeltaSink(target, "app", MergeSpec(keys=["k"], null_safe_keys=True))
    sink.write(pa.table({"k": pa.array([None, 1], pa.int64()), "v": ["a", "b"]}), 0)
    sink.write(pa.table({"k": pa.array([None, 50], pa.int64()), "v": ["c", "d"]}), 1)
    rows = sorted(((r["k"] or 0), r["v"]) for r in support.rows(target, sort_by="v"))
    assert rows == [(0, "c"), (1, "b"), (50, "d")]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"keys": ["k"], "target_predicate": " "}, "non-empty SQL predicate"),
        ({"mode": "append", "target_predicate": "t.d > 1"}, "only valid with mode='upsert'"),
        (
            {"keys": ["k"], "target_predicate": "t.d > 1", "when_not_matched_by_source": "delete"},
            "cannot be combined",
        ),
    ],
)
def test_bad_target_predicates_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        MergeSpec(**kwargs)


def test_a_target_predicate_that_does_not_evaluate_is_refused_before_writing(
    tmp_path: Path,
) -> None:
    from deltasink import InvalidInputError

    target = str(tmp_path / "t")
    sink = DeltaSink(target, "a", MergeSpec(keys=["k"], target_predicate="t.nope > 1"))
    with pytest.raises(InvalidInputError, match=r"target_predicate 't\.nope > 1' is not a valid"):
        sink.write(pa.table({"k": [1], "d": [2]}), 0)
    assert not Path(target).exists()
    spec = MergeSpec(keys=["k"], target_predicate="t.d > 1")
    assert MergeSpec.from_json(spec.to_json()) == spec


@pytest.mark.parametrize("direct", [True, False])
def test_replace_reports_the_rows_it_deleted(tmp_path: Path, direct: bool) -> None:
    target = str(tmp_path / "t")
    sink = DeltaSink(target, "a", MergeSpec(mode="replace", replace_by=["d"]))
    sink.write(pa.table({"d": ["a", "a", "b"], "v": [1, 2, 3]}), 0)
    batch = pa.table({"d": ["a", "c"], "v": [9, 10]})
    if direct:
        report = sink.write(batch, 1)
    else:
        sink.pre_commit(batch, 1)
        report = sink.commit(1)
    (result,) = report.results
    assert (result.rows_inserted, result.rows_deleted) == (2, 2)  # a, a out; a, c in
    rows = DeltaTable(target).to_pyarrow_table().sort_by("v").to_pylist()
    assert rows == [{"d": "b", "v": 3}, {"d": "a", "v": 9}, {"d": "c", "v": 10}]


def test_the_source_condition_is_checked_in_one_place() -> None:
    """Both engines check ``not_matched_by_source_condition`` through
    :func:`~deltasink.shapes.spec_rules.check_source_condition`: translated for delta-rs
    over the target's columns on either engine, handed to the engine's resolver in its
    dialect, and a resolver's failure becomes one named error."""
    from deltasink import InvalidInputError
    from deltasink.shapes.sparksql.fields import types_of
    from deltasink.shapes.spec_rules import check_source_condition

    spec = MergeSpec(
        keys=["id"],
        when_not_matched_by_source="delete",
        not_matched_by_source_condition="t.region = 'EU'",
    )
    columns = types_of(pa.schema([("id", pa.int32()), ("region", pa.string())]))
    seen: list[str] = []
    for sql in (TargetSql("delta-rs", columns), TargetSql("spark")):
        check_source_condition(spec, columns, sql=sql, table="/t", resolves=seen.append)
    assert seen == [
        spec.predicate("not_matched_by_source_condition", "delta-rs", columns),
        spec.predicate("not_matched_by_source_condition", "spark"),
    ]

    def unresolved(sql: str) -> None:
        raise RuntimeError("no such column")

    with pytest.raises(
        InvalidInputError, match=r"\"t.region = 'EU'\" is not a valid .* /t .*no such"
    ):
        check_source_condition(
            spec, columns, sql=TargetSql("spark"), table="/t", resolves=unresolved
        )
    # the delta-rs translation refuses a column the target lacks, before any resolver
    with pytest.raises(InvalidInputError):
        check_source_condition(
            spec,
            types_of(pa.schema([("id", pa.int32())])),
            sql=TargetSql("spark"),
            table="/t",
            resolves=seen.append,
        )
    assert len(seen) == 2
    check_source_condition(
        MergeSpec(keys=["id"]), {}, sql=TargetSql("spark"), table="/t", resolves=seen.append
    )
    assert len(seen) == 2
