"""Predicates mean on the ``spark`` engine what they mean on the embedded engine, in the
spec's recorded session time zone and ANSI mode whatever the evaluating session's
(issue 44): a ``replace_where`` with a zone-less timestamp literal replaces the same
rows on both engines from a session in another zone, and a spec built in a session
with ANSI mode off wraps an integer overflow around on both engines, where the
``spark`` engine refuses, by name, a session of the other mode.

Every test runs on the delta-spark suite's classic session (the ``delta_spark``
fixture, UTC, ANSI mode on), its settings changed inside a test and restored after;
inside the full suite this module runs in that suite's own process (``CHILD_MODULES``).
The embedded engine gets classic DataFrames (Spark checks the batch's rows, delta-rs
the target's): Sail, a Spark Connect session, would turn this process's PySpark to
Spark Connect. The embedded engine's Sail is proven by the differential suite.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from deltasink import ConfigurationError, DeltaSink, MergeSpec
from deltasink.input.arrow import spark_frame
from deltasink.ops.layout import PROP_SPEC
from tests import support
from tests.test_contract_spark import DELTA_SPARK_MODULE, delta_spark

pytestmark = DELTA_SPARK_MODULE
__all__ = ["delta_spark"]

UTC = dt.timezone.utc
ANSI = "spark.sql.ansi.enabled"


def _contents(path: str, *columns: str) -> list[tuple[Any, ...]]:
    table = DeltaTable(path).to_pyarrow_table(columns=list(columns))
    return sorted(zip(*(table.column(c).to_pylist() for c in columns), strict=True))


#: Target rows around midnight of 2024-01-01 in New York (05:00 UTC); the session is UTC.
_TIMES = {
    1: dt.datetime(2023, 12, 31, 23, 0, tzinfo=UTC),  # before both midnights
    2: dt.datetime(2024, 1, 1, 3, 0, tzinfo=UTC),  # after UTC's midnight, before New York's
    3: dt.datetime(2024, 1, 1, 6, 0, tzinfo=UTC),  # after both
}


def _rows(ids: list[int], value: str) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "ts": pa.array([_TIMES[i] for i in ids], pa.timestamp("us", tz="UTC")),
            "v": [value] * len(ids),
        }
    )


def test_replace_where_reads_a_zoneless_literal_in_the_recorded_zone_on_both_engines(
    delta_spark: Any, tmp_path: Path
) -> None:
    """The spec records New York; the session evaluating it is UTC. Spark read the
    literal in the session's zone before (the raw text went to ``replaceWhere``) and
    replaced row 2 too; now both engines replace row 3 only."""
    spec = MergeSpec(
        mode="replace",
        replace_where="ts >= TIMESTAMP '2024-01-01 00:00:00'",
        time_zone="America/New_York",
    )
    found = {}
    for engine in ("spark", "embedded"):
        target = str(tmp_path / engine)
        extra = {"spark": delta_spark} if engine == "spark" else {}
        DeltaSink(target, "seed", MergeSpec(mode="append"), engine="embedded").write(
            _rows([1, 2, 3], "old"), 0
        )
        batch = spark_frame(delta_spark, _rows([3], "new"))  # classic rows: Sail stays out
        DeltaSink(target, "app", spec, engine=engine, **extra).write(batch, 0)
        found[engine] = _contents(target, "id", "v")
    assert found["spark"] == found["embedded"] == [(1, "old"), (2, "old"), (3, "new")]


def _quantities() -> pa.Table:
    return pa.table(
        {"id": pa.array([1, 2], pa.int64()), "qty": pa.array([2**31 - 1, 5], pa.int32())}
    )


def test_a_spec_built_with_ansi_mode_off_wraps_an_overflow_around_on_both_engines(
    delta_spark: Any, tmp_path: Path
) -> None:
    """``qty + 1`` of the largest int is the smallest with ANSI mode off (Spark's
    answer): row 1 is deleted by ``delete_when`` on both engines, where ANSI mode on
    fails the write. The spark engine refuses the spec in a session with ANSI mode on."""
    with support.spark_conf(delta_spark, ANSI, "false"):
        # given: in this process the embedded engine's Sail (Spark Connect) may be the
        # active session; recording the active session's mode has its own test
        spec = MergeSpec(keys=["id"], delete_when="qty + 1 < 0", ansi_mode=False)
        assert MergeSpec.from_json(spec.to_json()) == spec
        spark_target = str(tmp_path / "spark")
        DeltaSink(spark_target, "app", spec, engine="spark", spark=delta_spark).write(
            _quantities(), 0
        )
    embedded_target = str(tmp_path / "embedded")
    DeltaSink(embedded_target, "app", spec, engine="embedded").write(
        spark_frame(delta_spark, _quantities()), 0
    )
    assert _contents(spark_target, "id", "qty") == _contents(embedded_target, "id", "qty")
    assert _contents(embedded_target, "id", "qty") == [(2, 5)]
    with pytest.raises(ConfigurationError, match=r"ANSI mode off.*ansi\.enabled=true"):
        DeltaSink(str(tmp_path / "refused"), "app", spec, engine="spark", spark=delta_spark).write(
            _quantities(), 0
        )
    assert not (tmp_path / "refused").exists()


def test_a_spec_built_before_the_session_records_the_mode_of_the_session_it_writes_in(
    delta_spark: Any, tmp_path: Path
) -> None:
    """A job template builds its spec at module level, before its session exists, so
    the spec records no ANSI mode; on the Databricks 14.3-16.4 line (ANSI mode off) the
    spark engine refused it as "ANSI mode on". The sink records its session's mode: the
    overflow wraps around as that session computes it, and the staged spec says so."""
    spec = MergeSpec(keys=["id"], delete_when="qty + 1 < 0")  # the session: ANSI on
    assert spec.ansi_mode is None
    target = str(tmp_path / "spark")
    with support.spark_conf(delta_spark, ANSI, "false"):
        sink = DeltaSink(target, "app", spec, engine="spark", spark=delta_spark)
        sink.write(_quantities(), 0)
    assert _contents(target, "id", "qty") == [(2, 5)]
    staged = DeltaTable(target + "_deltasink_staging/app")
    recorded = MergeSpec.from_json(staged.metadata().configuration[PROP_SPEC])
    assert recorded.ansi_mode is False
    assert spec.ansi_mode is None  # the caller's spec is left as built
