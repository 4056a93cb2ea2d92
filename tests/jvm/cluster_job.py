"""The driver of the cluster suite (``tests/test_cluster.py``): a classic PySpark job on
the standalone cluster of :mod:`tests.cluster`, whose ``spark-defaults.conf``
(``SPARK_CONF_DIR``) names the master, Delta's jars and two executors. It writes the
batches of :mod:`tests.cluster_data` with the spark engine and prints one JSON line of
what only the driver knows (reports, statuses, the executors); the test reads the
tables themselves with delta-rs.

``cases WORK``: one Spark application runs every case, each into ``WORK/<case>``:

* ``probe``: a task on each executor says which Python it runs and what ``import
  deltasink`` does there (it must fail: executors run no deltasink code);
* ``upsert``: versions 0-5 with ``sequence_by`` and ``delete_when``; a crash between
  staging and the target commit of 2, a restarted writer stages 3 and recovers (2 and 3
  in one coalesced commit), then 4, 5 and a replay of 5;
* ``append``, ``insert``, ``replace``, ``replace_where`` (over a seeded target),
  ``scd2`` (versions 1 and 2 coalesced): written one by one or pre-committed and
  committed together;
* ``quarantine``: version 1 fails a check, is quarantined, aborted; version 2 commits;
* ``cli``: version 1 is left staged by a crash, for ``deltasink --spark recover``.

``race WORK TARGET APP_ID``: one racing writer (an application of its own): it starts
its session, writes ``WORK/ready-<APP_ID>`` and waits for every racer's, then writes its
versions into the shared target.
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from deltasink import CommitError, DeltaSink, ReplayWarning
from deltasink._faults import FaultInjected, armed
from tests import cluster_data
from tests.cluster_data import RACE_VERSIONS, SPECS


def probe(_: int) -> tuple[int, str, str]:
    """Run on an executor: its Python worker daemon, what ``import deltasink`` does."""
    import os as os_

    try:
        import deltasink as found

        result = f"imported from {found.__file__}"
    except ImportError as exc:
        result = f"ImportError: {exc}"
    return os_.getppid(), result, os_.environ.get("PYTHONPATH", "")


class Job:
    def __init__(self, spark: SparkSession, work: str) -> None:
        self.spark, self.work = spark, work

    def frame(self, case: str, version: int, app_id: str = "") -> Any:
        schema = SPECS[case][1]
        return self.spark.createDataFrame(cluster_data.rows(case, version, app_id), schema)

    def sink(self, case: str, app_id: str = "", **options: Any) -> DeltaSink:
        return DeltaSink(
            os.path.join(self.work, "replace_where" if case == "seed" else case),
            app_id or case,
            SPECS[case][0],
            engine="spark",
            spark=self.spark,
            **options,
        )

    def probe(self) -> dict[str, Any]:
        context = self.spark.sparkContext
        found = context.parallelize(range(8), 8).map(probe).collect()
        return {
            "executors": context._jsc.sc().getExecutorIds().size(),
            "daemons": len({pid for pid, _, _ in found}),
            "imports": sorted({result for _, result, _ in found}),
            "paths": sorted({path for _, _, path in found}),
        }

    def crash(self, sink: DeltaSink, version: int) -> None:
        """``commit(version)`` dies between staging and the target commit."""
        with armed("publish.before_target_commit", "raise"):
            try:
                sink.commit(version)
            except CommitError as exc:
                if not isinstance(exc.__cause__, FaultInjected):
                    raise

    def upsert(self) -> dict[str, Any]:
        sink = self.sink("upsert")
        sink.write(self.frame("upsert", 0), 0)
        sink.pre_commit(self.frame("upsert", 1), 1)
        sink.pre_commit(self.frame("upsert", 2), 2)
        sink.commit(1)
        self.crash(sink, 2)
        restarted = self.sink("upsert")
        restarted.pre_commit(self.frame("upsert", 3), 3)  # pending beside version 2
        recovered = restarted.recover().committed_versions
        for version in (4, 5, 5):  # the second 5 is a replay
            restarted.write(self.frame("upsert", version), version)
        return {"recovered": recovered, "pending": restarted.status().pending_versions}

    def one_by_one(self, case: str, versions: range) -> dict[str, Any]:
        sink = self.sink(case)
        for version in versions:
            sink.write(self.frame(case, version), version)
        return {"pending": sink.status().pending_versions}

    def coalesced(self, case: str) -> dict[str, Any]:
        """0 alone, then 1 and 2 pre-committed and committed together, then a replay."""
        sink = self.sink(case)
        sink.write(self.frame(case, 0), 0)
        sink.pre_commit(self.frame(case, 1), 1)
        sink.pre_commit(self.frame(case, 2), 2)
        committed = sink.commit(2).committed_versions
        sink.write(self.frame(case, 1), 1)  # a replay of a committed version: nothing
        return {"committed": committed, "pending": sink.status().pending_versions}

    def quarantine(self) -> dict[str, Any]:
        sink = self.sink("quarantine", checks=cluster_data.CHECKS)
        sink.write(self.frame("quarantine", 0), 0)
        report = sink.write(self.frame("quarantine", 1), 1)
        quarantined = sorted(sink.status().quarantined)
        aborted = sink.abort(1)
        sink.write(self.frame("quarantine", 2), 2)
        return {
            "reported": report.quarantined_versions,
            "quarantined": quarantined,
            "aborted": aborted,
            "pending": sink.status().pending_versions,
        }

    def cli(self) -> dict[str, Any]:
        sink = self.sink("cli")
        sink.write(self.frame("cli", 0), 0)
        sink.pre_commit(self.frame("cli", 1), 1)
        self.crash(sink, 1)
        return {"pending": sink.status().pending_versions}

    def cases(self) -> dict[str, Any]:
        done: dict[str, Any] = {"probe": self.probe(), "upsert": self.upsert()}
        done["append"] = self.coalesced("append")
        done["insert"] = self.coalesced("insert")
        done["replace"] = self.one_by_one("replace", range(3))
        done["seed"] = self.one_by_one("seed", range(1))
        done["replace_where"] = self.one_by_one("replace_where", range(3))
        done["scd2"] = self.coalesced("scd2")
        done["quarantine"] = self.quarantine()
        done["cli"] = self.cli()
        return done

    def race(self, target: str, app_id: str) -> dict[str, Any]:
        sink = DeltaSink(
            target, app_id, SPECS["race"][0], engine="spark", spark=self.spark,
            max_commit_attempts=30,
        )  # fmt: skip
        frames = [self.frame("race", v, app_id) for v in range(RACE_VERSIONS)]
        self.spark.range(1).collect()  # the executors are up
        Path(self.work, f"ready-{app_id}").touch()
        deadline = time.monotonic() + 300
        while len(list(Path(self.work).glob("ready-*"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        for version, frame in enumerate(frames):
            sink.write(frame, version)
        return {"pending": sink.status().pending_versions}


def main() -> None:
    role, work = sys.argv[1:3]
    warnings.simplefilter("ignore", ReplayWarning)
    # master, Delta's jars and executors: spark-defaults.conf in SPARK_CONF_DIR
    spark = SparkSession.builder.appName(f"deltasink-cluster-{role}").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    job = Job(spark, work)
    result = job.cases() if role == "cases" else job.race(sys.argv[3], sys.argv[4])
    result["master"] = spark.sparkContext.master
    print(json.dumps(result), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
