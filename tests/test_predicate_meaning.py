"""The embedded engine gives each predicate setting Spark SQL's meaning: the cases that
selected other rows than Spark, or were accepted and then failed at publish, each now
behaving as Spark does (on Sail for the batch's rows, on delta-rs for the target's) or
refused by name before anything is written. Spark's answers are given here (the
differential suite, ``tests/test_predicate_differential.py``, asks Spark itself)."""

from __future__ import annotations

import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from deltasink import ConfigurationError, DeltaSink, MergeSpec, checks
from tests import support

#: Target rows: the issue's quantities 3 and 2, and columns for each case.
ROWS = pa.table(
    {
        "id": pa.array([1, 2], pa.int64()),
        "qty": pa.array([3, 2], pa.int32()),
        "name": ["abc", "xy"],
        "a": [None, "y"],
        "b": ["x", "z"],
        "Zone": ["EU", "US"],
        "d": [datetime.date(2024, 1, 5), datetime.date(2024, 2, 5)],
        "ts": pa.array(
            [datetime.datetime(2024, 1, 1, 12, 0, 0, 1), datetime.datetime(2024, 1, 1, 11)],
            pa.timestamp("us", tz="UTC"),
        ),
        "v": ["old", "old"],
    }
)


def _target(tmp_path: Path, name: str) -> str:
    path = str(tmp_path / name)
    write_deltalake(path, ROWS)
    return path


def _contents(path: str) -> list[tuple[int, str]]:
    table = DeltaTable(path).to_pyarrow_table(columns=["id", "v"])
    return sorted(zip(table.column("id").to_pylist(), table.column("v").to_pylist(), strict=True))


def _new(ids: list[int]) -> pa.Table:
    rows = ROWS.filter(pa.array([i in ids for i in ROWS.column("id").to_pylist()]))
    return rows.set_column(rows.schema.get_field_index("v"), "v", pa.array(["new"] * rows.num_rows))


#: predicate over the rows (unqualified) -> the ids Spark selects
SPARK_SELECTS = {
    "qty / 2 = 1": [2],  # 3 / 2 is 1.5
    "qty * 0.1 = 0.3": [1],  # exact decimals
    "substring(name, 0, 2) = 'ab'": [1],  # position 0 is 1
    "concat(a, b) IS NULL": [1],  # null in, null out
    "ts < TIMESTAMP '2024-01-01 12:00:00Z'": [2],
    "zone = 'EU'": [1],  # names resolve case-insensitively
    "date_format(d, 'yyyy-MM') = '2024-01'": [1],
    "if(qty > 2, true, false)": [1],
}


@pytest.mark.parametrize("text", sorted(SPARK_SELECTS))
def test_replace_where_replaces_the_rows_spark_selects(tmp_path: Path, text: str) -> None:
    target = _target(tmp_path, "t")
    chosen = SPARK_SELECTS[text]
    DeltaSink(target, "app", MergeSpec(mode="replace", replace_where=text)).write(_new(chosen), 0)
    assert _contents(target) == [(i, "new" if i in chosen else "old") for i in (1, 2)]


@pytest.mark.parametrize("text", sorted(SPARK_SELECTS))
def test_target_predicate_matches_the_rows_spark_selects(tmp_path: Path, text: str) -> None:
    target = _target(tmp_path, "t")
    chosen = SPARK_SELECTS[text]
    qualified = (
        text.replace("qty", "t.qty").replace("(name", "(t.name").replace("(a, b", "(t.a, t.b")
    )
    qualified = (
        qualified.replace("ts <", "t.ts <").replace("zone", "t.zone").replace("(d,", "(t.d,")
    )
    spec = MergeSpec(keys=["id"], target_predicate=qualified)
    DeltaSink(target, "app", spec).write(_new(chosen), 0)
    # one row per key: a selected row is updated, never inserted again
    assert _contents(target) == [(i, "new" if i in chosen else "old") for i in (1, 2)]


@pytest.mark.parametrize("text", sorted(SPARK_SELECTS))
def test_not_matched_by_source_condition_deletes_the_rows_spark_selects(
    tmp_path: Path, text: str
) -> None:
    target = _target(tmp_path, "t")
    spec = MergeSpec(
        keys=["id"], when_not_matched_by_source="delete", not_matched_by_source_condition=text
    )
    fresh = pa.Table.from_pylist([{"id": 9, "v": "new"}], schema=ROWS.schema)
    DeltaSink(target, "app", spec).write(fresh, 0)
    kept = [(i, "old") for i in (1, 2) if i not in SPARK_SELECTS[text]]
    assert _contents(target) == [*kept, (9, "new")]


@pytest.mark.parametrize("text", sorted(SPARK_SELECTS))
def test_delete_when_and_expect_select_the_rows_spark_selects(
    tmp_path: Path, text: str, spark: Any
) -> None:
    target = _target(tmp_path, "t")
    chosen = SPARK_SELECTS[text]
    DeltaSink(target, "app", MergeSpec(keys=["id"], delete_when=text)).write(_new([1, 2]), 0)
    assert _contents(target) == [(i, "new") for i in (1, 2) if i not in chosen]
    sink = DeltaSink(
        str(tmp_path / "e"), "app", MergeSpec(mode="append"), checks=[checks.expect(text)]
    )
    assert sink.write(_new(chosen), 0).quarantined_versions == []
    assert sink.write(_new([1, 2]), 1).quarantined_versions == [1]


@pytest.mark.parametrize(
    ("kwargs", "construct"),
    [
        (
            {"mode": "replace", "replace_where": "ts < TIMESTAMP '2024-01-01 12:00:00'"},
            "time zone 'PST'",
        ),
        ({"mode": "replace", "replace_where": "name RLIKE '(?<=a)c'"}, "look-around"),
        ({"keys": ["id"], "delete_when": "name RLIKE 'b$c'"}, r"\$ before more pattern"),
        ({"keys": ["id"], "target_predicate": "qty > 1"}, "unqualified column qty"),
        ({"mode": "replace", "replace_where": "qty % id > 1"}, "% by a column"),
        ({"keys": ["id"], "delete_when": "d = current_date()"}, "current_date"),
    ],
)
def test_what_an_engine_would_read_otherwise_is_refused_when_the_spec_is_built(
    kwargs: dict[str, Any], construct: str
) -> None:
    if "without" in str(kwargs) or "TIMESTAMP" in str(kwargs):
        with pytest.raises(ConfigurationError, match=construct):
            MergeSpec(**kwargs, time_zone="PST")  # a zone deltasink does not read
        return
    with pytest.raises(
        ConfigurationError, match=rf"MergeSpec\.\w+ .* uses .*{construct}.*Instead, "
    ):
        MergeSpec(**kwargs)


#: predicates people write every day (issue 44), in a spec recording the session time
#: zone +01:00 -> the ids Spark (that zone, ANSI mode) selects
EVERYDAY = {
    "name RLIKE '(?i)^ABC$'": [1],  # Java's (?i) and $, spelled out for Rust
    "ts < TIMESTAMP '2024-01-01 12:30:00'": [2],  # 11:30 UTC
    "hour(ts) = 13": [1],  # 12:00 UTC is 13:00 at +01:00
    "qty / id > 1.4": [1],  # 3 / 1 and 2 / 2, as doubles
    "try_cast(Zone AS INT) IS NULL AND qty = 3": [1],
    "round(CAST(qty AS DOUBLE) / 2.0D, 0) = 2": [1],  # 1.5 half up; 1.0
}


@pytest.mark.parametrize("text", sorted(EVERYDAY))
def test_everyday_predicates_replace_the_rows_spark_selects(tmp_path: Path, text: str) -> None:
    """Each was refused on every engine before (issue 44): now the batch's rows (Sail)
    and the target's (delta-rs) are selected as Spark selects them."""
    target = _target(tmp_path, "t")
    chosen = EVERYDAY[text]
    spec = MergeSpec(mode="replace", replace_where=text, time_zone="+01:00")
    DeltaSink(target, "app", spec).write(_new(chosen), 0)
    assert _contents(target) == [(i, "new" if i in chosen else "old") for i in (1, 2)]


def test_the_session_time_zone_is_recorded_with_the_spec_only_when_a_predicate_reads_it() -> None:
    reads = MergeSpec(mode="replace", replace_where="hour(ts) = 13", time_zone="Europe/Paris")
    assert MergeSpec.from_json(reads.to_json()) == reads
    assert '"time_zone": "Europe/Paris"' in reads.to_json()
    found = MergeSpec(mode="replace", replace_where="ts < TIMESTAMP '2024-01-01 12:30:00'")
    assert found.time_zone is not None  # the active session's, else UTC: recorded
    assert "time_zone" not in MergeSpec(mode="replace", replace_where="qty > 1").to_json()
    check = checks.expect("hour(ts) = 13", time_zone="+01:00")
    assert check.time_zone == "+01:00"
    assert checks.decode(checks.encode([check]))[0] == (check,)


def test_round_of_a_double_rounds_its_decimal_text_half_up_as_of_a_decimal(
    tmp_path: Path,
) -> None:
    """Spark rounds 1.005 (the double's text) to 1.01; Sail and DataFusion round the
    binary value, 1.00499..., to 1.0 (they were refused before issue 44)."""
    prices = pa.table({"id": [1, 2], "price": [1.005, 1.015]})
    doubles = str(tmp_path / "t")
    DeltaSink(doubles, "app", MergeSpec(keys=["id"])).write(prices, 0)
    spec = MergeSpec(keys=["id"], delete_when="round(price, 2) = 1.01")
    DeltaSink(doubles, "app2", spec).write(prices, 0)
    assert DeltaTable(doubles).to_pyarrow_table().column("id").to_pylist() == [2]
    exact = pa.table(
        {"id": [1, 2], "price": pa.array([Decimal("1.005"), Decimal("1.015")], pa.decimal128(6, 3))}
    )
    target = str(tmp_path / "u")
    DeltaSink(target, "app", MergeSpec(keys=["id"])).write(exact, 0)
    DeltaSink(target, "app2", MergeSpec(keys=["id"], delete_when="round(price, 2) = 1.01")).write(
        exact, 0
    )
    assert DeltaTable(target).to_pyarrow_table().column("id").to_pylist() == [2]  # 1.005 -> 1.01


def test_an_overflow_fails_the_write_as_in_spark_and_nothing_is_written(tmp_path: Path) -> None:
    """Spark's ANSI mode fails on ``qty + 1`` for the largest int; Sail and DataFusion
    would wrap around to the smallest and select the row."""
    rows = pa.table({"id": pa.array([1], pa.int64()), "qty": pa.array([2**31 - 1], pa.int32())})
    target = str(tmp_path / "t")
    sink = DeltaSink(target, "app", MergeSpec(keys=["id"], delete_when="qty + 1 < 0"))
    with pytest.raises(Exception, match="overflows"):
        sink.write(rows, 0)
    assert not Path(target).exists()


def test_an_expect_check_refused_for_the_column_types_is_refused_at_the_first_batch(
    tmp_path: Path,
) -> None:
    prices = pa.table({"id": [1, 2], "price": pa.array([1.005, 1.015], pa.float32())})
    target = str(tmp_path / "t")
    check = checks.expect("round(price, 2) = 1.01")  # price could be a decimal: built
    sink = DeltaSink(target, "app", MergeSpec(keys=["id"]), checks=[check])
    with pytest.raises(ConfigurationError, match=r"checks\.expect .* uses round of a float"):
        sink.write(prices, 0)
    assert not Path(target).exists()
    assert support.staged_versions(sink.staging) == []


def test_floor_of_nan_is_zero_as_in_spark(tmp_path: Path) -> None:
    """Spark's ``floor(NaN)`` is 0, so ``1 < floor(x)`` is false for a NaN row; Sail
    answered NaN, which sorts above every number, and deleted it (differential suite,
    seed 909907858)."""
    rows = pa.table(
        {
            "id": pa.array([1, 2, 3], pa.int64()),
            "x": pa.array([float("nan"), 2.5, 0.5], pa.float32()),
        }
    )
    target = str(tmp_path / "t")
    DeltaSink(target, "app", MergeSpec(keys=["id"], delete_when="1 < floor(x)")).write(rows, 0)
    assert sorted(DeltaTable(target).to_pyarrow_table().column("id").to_pylist()) == [1, 3]


def test_the_right_side_of_a_comparison_is_not_evaluated_where_the_left_is_null(
    tmp_path: Path,
) -> None:
    """Spark evaluates ``abs(tiny)`` only where the left side is not null, so its
    overflow at -128 never fails here; the range check made the write fail on every
    engine but Spark (differential suite, seed 865641963)."""
    rows = pa.table(
        {
            "id": pa.array([1, 2], pa.int64()),
            "zone": ["EU", "US"],
            "tiny": pa.array([-128, 3], pa.int8()),
        }
    )
    target = str(tmp_path / "t")
    spec = MergeSpec(keys=["id"], delete_when="CASE 'ab' WHEN zone THEN 5 END > abs(tiny)")
    DeltaSink(target, "app", spec).write(rows, 0)
    assert sorted(DeltaTable(target).to_pyarrow_table().column("id").to_pylist()) == [1, 2]


def test_a_float_and_an_integer_are_compared_as_doubles(tmp_path: Path) -> None:
    """Spark's ANSI mode compares a float with an integer as doubles: 2147483647 as a
    float is 2147483648.0, above an int column's 2147483647; compared as floats both
    are 2147483648.0 and the row was deleted (differential suite, seed 15583695)."""
    rows = pa.table(
        {
            "id": pa.array([1], pa.int64()),
            "f32": pa.array([0.5], pa.float32()),
            "qty": pa.array([2**31 - 1], pa.int32()),
        }
    )
    target = str(tmp_path / "t")
    spec = MergeSpec(keys=["id"], delete_when="CAST(2147483647 AS FLOAT) BETWEEN f32 AND qty")
    DeltaSink(target, "app", spec).write(rows, 0)
    assert DeltaTable(target).to_pyarrow_table().column("id").to_pylist() == [1]


def test_a_decimal_cast_on_a_side_spark_skips_does_not_fail(tmp_path: Path) -> None:
    """``CAST(qty AS DECIMAL(12,3))`` overflows for 2147483647, but Spark evaluates the
    right side of an AND only where its left is not false; Sail failed the write
    (differential suite, seed 1453115599)."""
    rows = pa.table(
        {
            "id": pa.array([1, 2], pa.int64()),
            "f32": pa.array([0.5, 9.0], pa.float32()),
            "qty": pa.array([2**31 - 1, 1], pa.int32()),
            "amt": pa.array([Decimal("1.000"), Decimal("5.000")], pa.decimal128(12, 3)),
        }
    )
    target = str(tmp_path / "t")
    text = "NOT (f32 > qty AND amt > CAST(qty AS DECIMAL(12,3)))"
    DeltaSink(target, "app", MergeSpec(keys=["id"], delete_when=text)).write(rows, 0)
    assert DeltaTable(target).to_pyarrow_table().column("id").to_pylist() == [2]


def test_a_predicate_of_constants_only_is_refused_when_the_spec_is_built(tmp_path: Path) -> None:
    """``2 * coalesce(100000, tiny) > 127`` is a constant (Sail folded the coalesce, then a
    range check's failing branch; seed 1453115599), as is ``CAST(0 AS DECIMAL(38,10)) <=>
    round(2.50, 1)``, which Sail and DataFusion fail while folding: refused by name,
    nothing written."""
    target = str(tmp_path / "t")
    for text in (
        "(2 * coalesce(100000, tiny)) > 127",
        "CAST(0 AS DECIMAL(38,10)) <=> round(2.50, 1)",
    ):
        with pytest.raises(ConfigurationError, match="constants only"):
            DeltaSink(target, "app", MergeSpec(keys=["id"], delete_when=text))
    assert not Path(target).exists()


def test_zero_is_in_a_list_holding_minus_zero_on_delta_rs() -> None:
    """DataFusion turns four ``=`` joined by OR into an ``IN`` list, whose hashing found
    0.0 outside (..., -0.0D) where Spark finds it inside (differential suite, seed
    20261126): -0.0 is made 0.0 before a comparison."""
    from deltasink.shapes.sparksql.fields import translate
    from deltasink.shapes.sparksql.types import SqlType
    from tests.predicate_engines import datafusion_batched

    text = "price IN (0.1D, 1E-7, CAST('Infinity' AS DOUBLE), -0.0D)"
    written = translate(text, "replace_where", {"price": SqlType("double")}, "delta-rs")
    rows = pa.table({"Id": [1, 2, 3, 4], "price": [0.0, -0.0, 0.5, None]})
    assert datafusion_batched(rows, [written]) == [[True, True, False, None]]


def test_a_decimal_zero_with_a_scale_is_written_in_plain_digits() -> None:
    """``CAST(0.3 AS DECIMAL(4,0))`` (0) compared with a ``DECIMAL(38,10)`` was written
    ``CAST('0E-10' AS DECIMAL(38,10))``, which neither Sail nor DataFusion reads
    (differential suite, seed 1683972181)."""
    from deltasink.shapes.sparksql.fields import translate
    from deltasink.shapes.sparksql.types import SqlType
    from tests.predicate_engines import datafusion_batched

    text = "CAST(0.3 AS DECIMAL(4,0)) < CAST(qty AS DECIMAL(38,10))"
    written = translate(text, "replace_where", {"qty": SqlType("int")}, "delta-rs")
    rows = pa.table({"Id": [1, 2, 3], "qty": pa.array([1, 0, None], pa.int32())})
    assert datafusion_batched(rows, [written]) == [[True, False, None]]


#: bround (half even) of doubles and decimals: the value -> Spark's bround(value, places)
BROUND = [
    (0.5, 0, 0.0),
    (1.5, 0, 2.0),
    (2.5, 0, 2.0),
    (-2.5, 0, -2.0),
    (0.125, 2, 0.12),
    (-0.125, 2, -0.12),
    (2.675, 2, 2.68),  # its text is 2.675: a tie; the binary value is below it
    (1e15 + 0.5, 0, 1e15),
    (1e15 + 0.5, 4, 1e15 + 0.5),  # its 4-place decimal, back to a double exactly (seed 4401)
    (1e300, 2, 1e300),
]


def _spark_bround(value: float, places: int) -> float:
    """Spark's ``bround`` of a double: ``BigDecimal(Double.toString(v))`` rounded half
    even (an integer already from 2**52 on)."""
    from decimal import ROUND_HALF_EVEN

    if abs(value) >= 2.0**52:
        return value
    step = Decimal(1).scaleb(-places)
    return float(Decimal(repr(value)).quantize(step, rounding=ROUND_HALF_EVEN)) + 0.0


def test_bround_of_a_double_rounds_its_decimal_text_half_even_on_every_engine() -> None:
    """Spark's ``bround`` of a double rounds its shortest decimal text half even;
    DataFusion has no ``bround`` (it was refused on the embedded engine): spelled out,
    here for DataFusion (Sail gets the same in Spark's dialect: the differential suite).
    NaN stays, null is null."""
    from deltasink.shapes.sparksql.fields import translate
    from deltasink.shapes.sparksql.types import SqlType
    from tests.predicate_engines import datafusion_batched

    values = [v for v, _, _ in BROUND]
    assert [_spark_bround(v, p) for v, p, _ in BROUND] == [r for _, _, r in BROUND]
    rows = pa.table({"Id": list(range(1, len(values) + 3)), "x": [*values, float("nan"), None]})
    for places in (0, 2, 4):
        want = [r for v, p, r in BROUND if p == places]
        text = f"bround(x, {places}) IN ({', '.join(f'{w!r}D' for w in want)})"
        written = translate(text, "replace_where", {"x": SqlType("double")}, "delta-rs")
        expected = [_spark_bround(v, places) in want for v in values] + [False, None]
        assert datafusion_batched(rows, [written]) == [expected], places
    nan = translate("isnan(bround(x, 1))", "replace_where", {"x": SqlType("double")}, "delta-rs")
    assert datafusion_batched(rows, [nan]) == [[False] * len(values) + [True, False]]


def test_bround_of_a_decimal_deletes_the_rows_spark_selects(tmp_path: Path) -> None:
    """``bround(2.55, 1)`` is 2.6 and ``bround(2.65, 1)`` 2.6 in Spark (half even), where
    ``round`` gives 2.7 for the second; the embedded engine (Sail, then delta-rs)
    deletes the rows Spark selects."""
    rows = pa.table(
        {
            "id": [1, 2, 3, 4],
            "amt": pa.array(
                [Decimal(a) for a in ("2.55", "2.65", "2.75", "-2.65")], pa.decimal128(5, 2)
            ),
        }
    )
    target = str(tmp_path / "t")
    DeltaSink(target, "app", MergeSpec(keys=["id"])).write(rows, 0)
    spec = MergeSpec(keys=["id"], delete_when="bround(amt, 1) IN (2.6, -2.6)")
    DeltaSink(target, "app2", spec).write(rows, 0)
    assert DeltaTable(target).to_pyarrow_table().column("id").to_pylist() == [3]


def test_a_spec_recording_ansi_mode_off_wraps_an_overflow_around_as_spark_does(
    tmp_path: Path,
) -> None:
    """With ANSI mode off Spark wraps ``qty + 1`` of the largest int around to the
    smallest, and divides by zero to null: a spec recording that mode deletes the row
    (Sail) and replaces the rows (delta-rs) Spark selects, where ANSI mode fails."""
    rows = pa.table(
        {"id": pa.array([1, 2], pa.int64()), "qty": pa.array([2**31 - 1, 0], pa.int32())}
    )
    target = str(tmp_path / "t")
    spec = MergeSpec(keys=["id"], delete_when="qty + 1 < 0", ansi_mode=False)
    assert '"ansi_mode": false' in spec.to_json()
    assert "ansi_mode" not in MergeSpec(keys=["id"], delete_when="qty + 1 < 0").to_json()
    DeltaSink(target, "app", spec).write(rows, 0)
    assert DeltaTable(target).to_pyarrow_table().column("id").to_pylist() == [2]
    replaced = str(tmp_path / "r")
    DeltaSink(replaced, "seed", MergeSpec(mode="append")).write(rows, 0)
    where = "(id / qty) IS NULL OR qty + 1 < 0"  # 2 / 0 is null; the largest wraps
    replace = MergeSpec(mode="replace", replace_where=where, ansi_mode=False)
    DeltaSink(replaced, "app", replace).write(rows.slice(1), 0)
    assert sorted(DeltaTable(replaced).to_pyarrow_table().column("id").to_pylist()) == [2]
    check = checks.expect("qty + 1 > 0", ansi_mode=False)
    assert check.ansi_mode is False
    assert checks.decode(checks.encode([check]))[0] == (check,)


def test_a_spec_built_in_a_session_with_ansi_mode_off_records_it(monkeypatch: Any) -> None:
    """Unset, ``ansi_mode`` is the active Spark session's when it is off (recorded, so
    every engine and a later recovery evaluate it); on, it stays unset (meaning on)."""
    import pyspark.sql

    class Conf:
        def __init__(self, value: str) -> None:
            self.value = value

        def get(self, key: str, default: object = None) -> str:
            assert key in ("spark.sql.ansi.enabled", "spark.sql.session.timeZone")
            return self.value if key == "spark.sql.ansi.enabled" else "UTC"

    class Session:
        conf = Conf("false")

    monkeypatch.setattr(pyspark.sql.SparkSession, "getActiveSession", lambda: Session())
    assert MergeSpec(keys=["id"], delete_when="qty + 1 < 0").ansi_mode is False
    assert MergeSpec(keys=["id"]).ansi_mode is None  # no predicate: nothing to record
    assert checks.expect("qty > 0").ansi_mode is False
    Session.conf = Conf("true")
    assert MergeSpec(keys=["id"], delete_when="qty + 1 < 0").ansi_mode is None


def test_what_ansi_mode_off_reads_otherwise_is_refused_at_the_first_batch(tmp_path: Path) -> None:
    """Without ANSI mode Spark converts a string literal beside a number by other rules
    and compares a date in a list with a string as text (``'2024-1-5'`` is not
    ``'2024-01-05'`` there): refused by name with ANSI mode off (at the first batch,
    when the types are known; nothing written), accepted with it on."""
    for text in ("qty = '3'", "d IN ('2024-1-5')", "coalesce(d, '2024-01-05') = d"):
        MergeSpec(mode="replace", replace_where=text)  # ANSI mode on: Spark converts by value
        with pytest.raises(ConfigurationError, match="with ANSI mode off"):
            DeltaSink(
                "unused", "app", MergeSpec(mode="replace", replace_where=text, ansi_mode=False)
            ).write(ROWS, 0)
    MergeSpec(mode="replace", replace_where="d IN ('2024-01-05')", ansi_mode=False)


def test_a_null_divided_by_a_zero_column_is_null_on_sail(tmp_path: Path) -> None:
    """Spark: a null dividend is null whatever the divisor; Sail failed ("Division by
    zero") on a zero divisor beside a null dividend (differential suite, seed
    250658533: ``try_cast(Zone AS INT) / price``)."""
    rows = pa.table({"id": [1, 2], "name": ["x", "4"], "price": [0.0, 2.0]})
    target = str(tmp_path / "t")
    spec = MergeSpec(keys=["id"], delete_when="(try_cast(name AS INT) / price) IS NULL")
    DeltaSink(target, "app", spec).write(rows, 0)
    assert DeltaTable(target).to_pyarrow_table().column("id").to_pylist() == [2]


def test_a_case_fixed_by_a_literal_condition_is_a_constant_on_sail(tmp_path: Path) -> None:
    """``2 * CASE WHEN True THEN 10 WHEN flag THEN -128 ELSE qty END`` is 20: Sail folded
    the CASE, then the range check's failing branch (differential suite, seed
    250658533); it is now converted as a constant."""
    rows = pa.table({"id": [1, 2], "flag": [True, False], "qty": pa.array([20, 3], pa.int32())})
    target = str(tmp_path / "t")
    text = "(2 * CASE WHEN True THEN 10 WHEN flag THEN -128 ELSE qty END) = qty"
    DeltaSink(target, "app", MergeSpec(keys=["id"], delete_when=text)).write(rows, 0)
    assert DeltaTable(target).to_pyarrow_table().column("id").to_pylist() == [2]


def test_a_recorded_spec_loads_as_recorded_whatever_session_reads_it(monkeypatch: Any) -> None:
    """A spec recorded without a zone or ANSI mode (built where no session told them)
    loads with neither, also in a session with ANSI mode off: otherwise it differs from
    the spec that staged it and its pending versions are refused as a spec change
    (found on PySpark 3.5, whose sessions default to ANSI mode off)."""
    from deltasink.shapes.sparksql import fields

    spec = MergeSpec(keys=["id"], sequence_by="seq", delete_when="op = 'D'")
    assert (spec.time_zone, spec.ansi_mode) == (None, None)
    monkeypatch.setattr(fields, "session_ansi", lambda *_: False)
    assert MergeSpec(keys=["id"], delete_when="op = 'D'").ansi_mode is False  # built here
    assert MergeSpec.from_json(spec.to_json()) == spec
