"""``foreach_batch_writer``: a ``foreachBatch`` function that survives pickling into
another process (Spark Connect, serverless) and builds its sink there, lazily."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark import cloudpickle

from deltasink import (
    ConfigurationError,
    DeltaSink,
    ForeachBatchWriter,
    MergeSpec,
    checks,
    foreach_batch_writer,
)
from tests import support

UPSERT = MergeSpec(keys=["id"])


def batch(spark: Any, rows: list[tuple[int, str]]) -> Any:
    return spark.createDataFrame(rows, "id long, value string")


def test_the_writer_pickles_and_builds_one_sink_from_the_batch_session(
    spark: Any, target: str
) -> None:
    writer = foreach_batch_writer(target, "stream", UPSERT, checks=[checks.no_nulls("value")])
    shipped: ForeachBatchWriter = cloudpickle.loads(cloudpickle.dumps(writer))
    assert shipped == writer
    first = shipped(batch(spark, [(1, "a"), (2, "b")]), 0)
    assert first.committed_versions == [0]
    assert shipped(batch(spark, [(2, "B"), (3, "c")]), 1).committed_versions == [1]
    replay = shipped(batch(spark, [(2, "B"), (3, "c")]), 1)  # Spark's replay: a no-op
    assert (replay.results, replay.committed_version) == ((), 1)
    assert shipped.sink() is writer.sink()  # one sink (one writer epoch) per process
    assert shipped.sink().engine == "embedded"
    assert support.rows(target) == [
        {"id": 1, "value": "a"},
        {"id": 2, "value": "B"},
        {"id": 3, "value": "c"},
    ]
    assert support.marker(target, "stream") == 1
    bad = shipped(batch(spark, [(4, None)]), 2)  # the checks travelled with it
    assert bad.quarantined_versions == [2]


def test_the_writer_runs_in_another_process(tmp_path: Path, target: str) -> None:
    writer = foreach_batch_writer(target, "remote", UPSERT)
    DeltaSink(target, "remote", UPSERT).write(pa.table({"id": [1], "value": ["a"]}), 0)
    payload = tmp_path / "writer.pkl"
    payload.write_bytes(cloudpickle.dumps(writer))
    script = (
        "import sys, pyarrow as pa\n"
        "from pyspark import cloudpickle\n"
        "write = cloudpickle.loads(open(sys.argv[1], 'rb').read())\n"
        "for v in (1, 2, 2):\n"
        "    r = write(pa.table({'id': [v + 1], 'value': [f'v{v}']}), v)\n"
        "    print(v, r.committed_versions)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(payload)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["1 [1]", "2 [2]", "2 []"]
    assert support.ids(target) == [1, 2, 3]
    assert support.marker(target, "remote") == 2


def test_bad_arguments_fail_on_the_driver_before_the_query_starts(spark: Any, target: str) -> None:
    with pytest.raises(ConfigurationError, match="takes no spark="):
        foreach_batch_writer(target, "stream", UPSERT, spark=spark)
    with pytest.raises(ConfigurationError, match="app_id"):
        foreach_batch_writer(target, "bad app id", UPSERT)
    with pytest.raises(TypeError, match="no_such_option"):
        foreach_batch_writer(target, "stream", UPSERT, no_such_option=1)
    assert not Path(target).exists()
