"""The SPEC contract on the embedded backend (delta-rs): Arrow input with coalesced
commits (the default), Spark input with one target commit per version."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from tests.contract import Harness, SinkContract, spark_tables


def arrow_batch(ids: list[int]) -> pa.Table:
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "value": pa.array([f"v{i}" for i in ids], pa.string())}
    )


class TestEmbeddedArrowInput(SinkContract):
    @pytest.fixture
    def harness(self, target: str) -> Harness:
        return Harness(target=target, app_id="contract-arrow", make_batch=arrow_batch)


class TestEmbeddedSparkInput(SinkContract):
    @pytest.fixture
    def harness(self, target: str, spark: Any) -> Harness:
        def spark_batch(ids: list[int]) -> Any:
            return spark.createDataFrame([(i, f"v{i}") for i in ids], "id long, value string")

        return Harness(
            target=target,
            app_id="contract-spark",
            make_batch=spark_batch,
            make_table=spark_tables(spark),
            sink_kwargs={"coalesce": False},  # one target commit per version
        )
