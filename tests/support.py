"""Test helpers that read Delta tables directly (delta-rs and the raw JSON log)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable

from deltasink.ops.layout import VERSION_COLUMN


def exists(uri: str) -> bool:
    return bool(DeltaTable.is_deltatable(uri))


def rows(uri: str, *, sort_by: str = "id") -> list[dict[str, Any]]:
    """All rows of a Delta table as dicts, sorted by ``sort_by``; [] if absent."""
    if not exists(uri):
        return []
    table = DeltaTable(uri).to_pyarrow_table()
    if sort_by in table.column_names:
        table = table.sort_by(sort_by)
    return table.to_pylist()


def ids(uri: str) -> list[int]:
    return [r["id"] for r in rows(uri)]


def marker(uri: str, app_id: str) -> int | None:
    if not exists(uri):
        return None
    version: int | None = DeltaTable(uri).transaction_version(app_id)
    return version


def table_version(uri: str) -> int | None:
    return DeltaTable(uri).version() if exists(uri) else None


def staged_versions(staging: str) -> list[int]:
    """Versions with data files in the staging table's current snapshot."""
    if not exists(staging):
        return []
    actions = pa.table(DeltaTable(staging).get_add_actions(flatten=True))
    if actions.num_rows == 0:
        return []
    return sorted({int(v) for v in actions.column(f"partition.{VERSION_COLUMN}").to_pylist()})


def staged_files_on_disk(staging: str) -> list[str]:
    """Every Parquet file under the staging directory (referenced or not)."""
    root = Path(staging)
    return sorted(
        str(p.relative_to(root)) for p in root.rglob("*.parquet") if "_delta_log" not in p.parts
    )


def log_commits(uri: str) -> dict[int, list[dict[str, Any]]]:
    """Every commit of a local Delta table: version -> its actions (raw JSON log)."""
    log = Path(uri) / "_delta_log"
    commits = {}
    for path in sorted(log.glob("*.json")):
        actions = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        commits[int(path.stem)] = actions
    return commits


def txn_commits(uri: str, app_id: str) -> dict[int, list[int]]:
    """batch version -> the Delta versions whose commit carries ``txn(app_id, version)``."""
    found: dict[int, list[int]] = {}
    for delta_version, actions in log_commits(uri).items():
        for action in actions:
            txn = action.get("txn")
            if txn and txn["appId"] == app_id:
                found.setdefault(int(txn["version"]), []).append(delta_version)
    return found


def txn_commits_all(uri: str) -> dict[tuple[str, int], list[int]]:
    """Every ``(app id, version)`` marker -> the Delta versions of the commits that carry it."""
    found: dict[tuple[str, int], list[int]] = {}
    for delta_version, actions in log_commits(uri).items():
        for action in actions:
            if "txn" in action:
                key = (action["txn"]["appId"], int(action["txn"]["version"]))
                found.setdefault(key, []).append(delta_version)
    return found


def commit_info(uri: str, delta_version: int) -> dict[str, Any]:
    for action in log_commits(uri)[delta_version]:
        if "commitInfo" in action:
            info: dict[str, Any] = action["commitInfo"]
            return info
    raise AssertionError(f"no commitInfo in version {delta_version} of {uri}")


#: Settings that make a test's classic Spark session cheap on tiny tables (measured in
#: docs/reliability.md, "The test suite's time"): no adaptive re-planning, one shuffle
#: partition, interpreted expressions instead of generated code (Janino's compile and
#: the JIT of each generated class cost more than they save on a few rows). The JVM's
#: JIT is left alone: C1 only saved the C2 compiler's time but made the driver's own
#: work about twice as slow over a whole suite. None changes what Delta writes: stats,
#: checkpoints and the log are Delta's defaults.
CHEAP_SPARK_CONF: dict[str, str] = {
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.shuffle.partitions": "1",
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}


@contextmanager
def spark_conf(spark: Any, key: str, value: str) -> Iterator[None]:
    """The Spark session's ``key`` set to ``value`` inside, the previous value restored
    after."""
    before = spark.conf.get(key)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        spark.conf.set(key, before)
