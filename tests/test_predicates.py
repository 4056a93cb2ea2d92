"""User SQL is parsed before it reaches an engine: every predicate is exactly one
boolean expression, re-emitted for the parser that reads it; a check that cannot work
is refused when it is made or the sink is built (engine-free: no table is touched)."""

from __future__ import annotations

from typing import Any

import pytest

from deltasink import ConfigurationError, DeltaSink, MergeSpec, checks
from deltasink.shapes.merge import compile_merge, replace_predicate
from deltasink.shapes.predicates import render, render_query
from deltasink.shapes.target_sql import TargetSql

#: Injection forms and other texts that are not exactly one boolean expression.
REFUSED = {
    "status = 'x') OR (1=1": "does not parse",  # stray parentheses (the example)
    "(status = 'x'": "does not parse",
    "status = 'x')": "does not parse",
    "status = 'x'; DELETE FROM t": "2 SQL statements",
    "status = 'x'; DROP TABLE t; --": "3 SQL statements",
    "status = 'x' /* OR 1=1": "does not parse",  # a comment swallowing the rest
    "status = 'x', 1 = 1": "does not parse",  # two expressions
    "status = 'x' other": "two expressions side by side",
    "1 + 1": "its type is INT",
    "'x'": "its type is VARCHAR",
    "upper(status)": "its type is VARCHAR",
    "NULL": "its type is NULL",
    "status IN (SELECT status FROM other)": "a subquery",
    "EXISTS (SELECT 1 FROM other)": "a subquery",
    "count(*) > 1": "an aggregate function",
    "row_number() OVER (ORDER BY id) = 1": "a window function",
    "status = ?": "a parameter placeholder",
    "SELECT 1": "a query",
    "DROP TABLE t": "a Drop statement",
    ";": "0 SQL statements",
    "   ": "non-empty",
}

SPECS: dict[str, Any] = {
    "delete_when": lambda p: MergeSpec(keys=["id"], delete_when=p),
    "target_predicate": lambda p: MergeSpec(keys=["id"], target_predicate=p),
    "replace_where": lambda p: MergeSpec(mode="replace", replace_where=p),
    "not_matched_by_source_condition": lambda p: MergeSpec(
        keys=["id"], when_not_matched_by_source="delete", not_matched_by_source_condition=p
    ),
}


@pytest.mark.parametrize("field", sorted(SPECS))
@pytest.mark.parametrize("text", sorted(REFUSED))
def test_a_predicate_that_is_not_one_boolean_expression_is_refused_by_name(
    field: str, text: str
) -> None:
    with pytest.raises(ConfigurationError, match=rf"MergeSpec\.{field} .*{REFUSED[text]}"):
        SPECS[field](text)


@pytest.mark.parametrize("text", sorted(REFUSED))
def test_an_expect_check_that_is_not_one_boolean_expression_is_refused(text: str) -> None:
    with pytest.raises(ConfigurationError, match=rf"checks\.expect .*{REFUSED[text]}"):
        checks.expect(text)


def test_the_recorded_spec_of_a_refused_predicate_is_refused_too() -> None:
    good = MergeSpec(keys=["id"], delete_when="op = 'D'")
    tampered = good.to_json().replace("op = 'D'", "op = 'D') OR (1=1")
    with pytest.raises(ConfigurationError, match=r"MergeSpec\.delete_when"):
        MergeSpec.from_json(tampered)


def test_each_engine_gets_the_parsed_predicate_reemitted_for_its_parser() -> None:
    # Spark reads a backslash escape and a double-quoted string; DataFusion's generic
    # dialect (delta-rs) reads '' escapes and takes a backslash literally.
    import pyarrow as pa

    from deltasink.shapes.sparksql.fields import translate, types_of

    text = "name = 'O\\'Brien' OR name = \"it's\" OR path = 'a\\\\b' -- ) OR (1=1"
    assert render(text, "spark") == "name = 'O\\'Brien' OR name = 'it\\'s' OR path = 'a\\\\b'"
    columns = types_of(pa.schema([("name", pa.string()), ("path", pa.string())]))
    assert translate(text, "replace_where", columns, "delta-rs") == (
        "(((`name` = 'O''Brien') OR (`name` = 'it''s')) OR (`path` = 'a\\b'))"
    )
    assert translate(text, "replace_where", columns, "spark") == (
        "(((`name` = 'O\\'Brien') OR (`name` = 'it\\'s')) OR (`path` = 'a\\\\b'))"
    )
    assert translate("NAME <=> path /* null-safe */", "replace_where", columns, "delta-rs") == (
        "(`name` IS NOT DISTINCT FROM `path`)"
    )
    assert render("exists(tags, x -> x = 'vip')", "spark") == "EXISTS(tags, x -> x = 'vip')"
    assert render("flag", "spark") == "flag"  # a bare column: the engine types it


def test_merge_plans_and_replace_predicates_carry_the_reemitted_predicates() -> None:
    spec = MergeSpec(
        keys=["id"],
        when_not_matched_by_source="delete",
        not_matched_by_source_condition="t.note = 'it\\'s' -- keep the rest",
    )
    import pyarrow as pa

    target = pa.schema([("id", pa.int64()), ("note", pa.string()), ("day", pa.string())])
    plan = compile_merge(
        spec, ["id", "note"], has_delete=False, sql=TargetSql.over("delta-rs", target)
    )
    (*_, by_source) = plan.clauses
    assert by_source.condition == "(t.`note` = 'it''s')"
    spark_plan = compile_merge(spec, ["id", "note"], has_delete=False, sql=TargetSql("spark"))
    assert spark_plan.clauses[-1].condition == "t.note = 'it\\'s'"
    pruned = MergeSpec(keys=["id"], target_predicate="t.day >= '2026' /* ) OR (1=1 */")
    assert compile_merge(
        pruned, ["id", "day"], has_delete=False, sql=TargetSql.over("delta-rs", target)
    ).on == ("t.`id` = s.`id` AND ((t.`day` >= '2026'))")
    reload = MergeSpec(mode="replace", replace_where="region = 'it\\'s'")
    rows = pa.table({"region": ["it's"]})
    assert (
        replace_predicate(reload, rows, sql=TargetSql.over("delta-rs", rows.schema))
        == "((`region` = 'it''s'))"
    )
    assert replace_predicate(reload, rows, sql=TargetSql("spark")) == "(region = 'it\\'s')"


def test_sql_checks_are_exactly_one_query_over_staged() -> None:
    for text, why in [
        ("SELECT 1; DROP TABLE t", "2 SQL statements"),
        ("DROP TABLE t", "is not a query"),
        ("id > 0", "is not a query"),
        ("SELECT * FROM staged WHERE (id > 0", "does not parse"),
        ("WITH staged AS (SELECT 1) SELECT * FROM staged", "defines its own `staged`"),
    ]:
        with pytest.raises(ConfigurationError, match=rf"checks\.sql .*{why}"):
            checks.sql(text)
    query = "WITH big AS (SELECT * FROM staged WHERE id > 9) SELECT staged.id FROM staged -- x"
    assert render_query(query, "v1") == (
        "WITH big AS (SELECT * FROM v1 AS staged WHERE id > 9) SELECT staged.id FROM v1 AS staged"
    )


def _two_arguments(batch: checks.StagedBatch, other: int) -> None:
    return None


@pytest.mark.parametrize(
    ("given", "why"),
    [
        ([1], r"checks\[0\] = 1 is not callable"),
        (["id > 0"], r"checks\[0\] = 'id > 0' is not callable"),
        ([checks.expect], "is the factory, not a check"),
        ([checks.no_nulls], "is a class, not a check"),
        ([checks.no_nulls("id"), _two_arguments], r"checks\[1\] .* cannot be called with one"),
        (checks.no_nulls("id"), "checks must be a list"),
        ("no_nulls(id)", "checks must be a list"),
    ],
)
def test_a_check_that_is_not_a_check_is_refused_when_the_sink_is_built(
    tmp_path: Any, given: Any, why: str
) -> None:
    target = str(tmp_path / "t")
    with pytest.raises(ConfigurationError, match=why):
        DeltaSink(target, "app", MergeSpec(keys=["id"]), checks=given)
    assert not (tmp_path / "t").exists()


def test_built_in_checks_with_invalid_arguments_are_refused_when_made() -> None:
    with pytest.raises(ConfigurationError, match="one or more column names"):
        checks.no_nulls()
    with pytest.raises(ConfigurationError, match="one or more column names"):
        checks.unique("id", 3)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="passes no batch"):
        checks.row_count_between(5, 1)
    with pytest.raises(ConfigurationError, match="whole numbers"):
        checks.row_count_between(1.5)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="percentage >= 0"):
        checks.row_count_within(-10)
    with pytest.raises(ConfigurationError, match="percentage >= 0"):
        checks.row_count_within(float("nan"))
    with pytest.raises(ConfigurationError, match="takes a predicate string"):
        checks.expect(["amount > 0"])  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="takes a query string"):
        checks.sql(["SELECT 1"])  # type: ignore[arg-type]


#: Predicates in the forms users write, each compared as written and as re-emitted.
ROUND_TRIP = [
    "op = 'D'",
    "op <> 'D' AND amount > 10",
    "NOT (op = 'U' OR amount IS NULL)",
    "amount BETWEEN 5 AND 20",
    "op IN ('D', 'X')",
    "name LIKE 'O\\'B%'",
    "name RLIKE '^[a-z]+$'",
    "coalesce(flag, false)",
    "flag",
    "nvl(amount, 0) >= 10",
    "if(amount > 10, true, false)",
    "CASE WHEN op = 'D' THEN true ELSE amount > 20 END",
    "date(ts) = DATE'2026-01-02'",
    "ts >= TIMESTAMP'2026-01-02 00:00:00'",
    "lower(name) = 'o\\'brien'",
    "length(name) > 3 AND substr(name, 1, 1) = 'O'",
    "amount <=> NULL",
    "array_contains(tags, 'vip')",
    "exists(tags, t -> t = 'vip')",
    "cast(amount AS INT) % 2 = 0",
    'name = "plain"',
]


def test_reemitted_predicates_select_the_same_rows_on_spark(spark: Any) -> None:
    import datetime

    rows = [
        ("D", 5.0, True, "O'Brien", datetime.datetime(2026, 1, 2, 10), ["vip"]),
        ("U", 15.0, None, "plain", datetime.datetime(2026, 1, 1, 9), []),
        ("X", None, False, "o'brien", datetime.datetime(2026, 1, 3, 8), ["x", "vip"]),
        ("U", 25.0, True, "abc", datetime.datetime(2026, 1, 2, 0), ["x"]),
    ]
    frame = spark.createDataFrame(
        rows,
        "op string, amount double, flag boolean, name string, ts timestamp, tags array<string>",
    )
    for text in ROUND_TRIP:
        rendered = render(text, "spark")
        as_written = [r[0] for r in frame.selectExpr(f"coalesce(({text}), false)").collect()]
        as_parsed = [r[0] for r in frame.selectExpr(f"coalesce(({rendered}), false)").collect()]
        assert as_parsed == as_written, (text, rendered)


#: Predicates both engines evaluate: Spark reads the text, delta-rs the re-emission.
BOTH_ENGINES = [
    "name = 'O\\'Brien'",
    'name = "it\'s"',
    "path = 'a\\\\b'",
    "name <> 'O\\'Brien' AND amount > 10",
    "op IN ('D', 'X') OR amount IS NULL",
    "amount BETWEEN 5 AND 20 -- ) OR (1=1",
    "name LIKE 'O\\'B%' /* a comment */",
    "amount <=> 15.0",
    "NOT (op = 'U')",
    "CASE WHEN op = 'D' THEN true ELSE amount > 20 END",
    "coalesce(amount, 0) >= 15",
]


def test_delta_rs_reads_the_reemitted_predicate_as_spark_reads_the_text(
    spark: Any, tmp_path: Any
) -> None:
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    from deltasink.shapes.sparksql.fields import translate, types_of

    table = pa.table(
        {
            "id": [1, 2, 3, 4],
            "op": ["D", "U", "X", "U"],
            "amount": [5.0, 15.0, None, 25.0],
            "name": ["O'Brien", "it's", "o'brien", "abc"],
            "path": ["a\\b", "a\\\\b", "ab", "a'b"],
        }
    )
    frame = spark.createDataFrame(
        table.to_pylist(), "id long, op string, amount double, name string, path string"
    )
    for i, text in enumerate(BOTH_ENGINES):
        spark_hits = sorted(
            r.id
            for r in frame.where(text).select("id").collect()  # null: not a hit
        )
        uri = str(tmp_path / f"t{i}")
        write_deltalake(uri, table)
        columns = types_of(table.schema)
        DeltaTable(uri).delete(translate(text, "replace_where", columns, "delta-rs"))
        kept = DeltaTable(uri).to_pyarrow_table().column("id").to_pylist()
        assert sorted(set(table.column("id").to_pylist()) - set(kept)) == spark_hits, text


def test_the_docs_table_of_constructs_is_generated() -> None:
    """docs/predicates.md's table is the allow-list run through the engines' own code
    (``tools/predicate_table.py``); refresh it with ``python tools/predicate_table.py``."""
    from tools import predicate_table

    assert predicate_table.main(["--check"]) == 0


def test_the_grammar_draws_every_construct_of_the_allow_list() -> None:
    """The differential suite's grammar has a rule for each row of the table, and draws
    each of them in a run (tests/predicate_grammar.py)."""
    import random

    from deltasink.shapes.sparksql.constructs import CONSTRUCTS
    from tests import predicate_grammar

    rules = (set(predicate_grammar.RULES) - {"refused"}) | set(predicate_grammar.REFUSED)
    assert {c.key for c in CONSTRUCTS} == rules
    drawn = predicate_grammar.draw(random.Random(36), 2000)
    used = set().union(*(d.constructs for d in drawn))
    # the refused constructs are drawn rarely (under 1% of the predicates): each of
    # their rules is asked once here
    grammar = predicate_grammar.Grammar(random.Random(36))
    assert all(rule(grammar, 2) for rule in predicate_grammar.REFUSED.values())
    assert rules - used - set(predicate_grammar.REFUSED) == set()
    assert used & set(predicate_grammar.REFUSED)
