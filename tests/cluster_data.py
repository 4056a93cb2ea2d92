"""The batches and specs of the cluster suite (``tests/test_cluster.py``), shared by the
driver job that writes them (``tests/jvm/cluster_job.py``) and the test that folds them
into the oracle (:class:`tests.oracle.Fold`). Plain rows: the job turns them into
DataFrames on the cluster (their pickled rows are read by the executors' Python
workers, which cannot import deltasink)."""

from __future__ import annotations

from typing import Any

from deltasink import MergeSpec, checks

Row = dict[str, Any]

#: Each case: its spec, the schema of its batches (a Spark DDL string).
SPECS: dict[str, tuple[MergeSpec, str]] = {
    "upsert": (
        MergeSpec(keys=["id"], sequence_by="seq", delete_when="op = 'D'"),
        "id long, seq long, op string, value string",
    ),
    "append": (MergeSpec(mode="append"), "id long, value string"),
    "insert": (MergeSpec(keys=["id"], mode="insert"), "id long, value string"),
    "replace": (MergeSpec(mode="replace", replace_by=["day"]), "day int, id long, value string"),
    "seed": (MergeSpec(mode="append"), "region string, id long, value string"),
    "replace_where": (
        MergeSpec(mode="replace", replace_where="region = 'EU'"),
        "region string, id long, value string",
    ),
    "scd2": (
        MergeSpec(mode="scd2", keys=["id"], sequence_by="seq", delete_when="op = 'D'"),
        "id long, seq long, op string, value string",
    ),
    "quarantine": (MergeSpec(keys=["id"]), "id long, amount long"),
    "cli": (MergeSpec(keys=["id"]), "id long, value string"),
    "race": (MergeSpec(keys=["id"], mode="insert"), "id long, writer string"),
}
#: The quarantine case's check: version 1 has a negative amount.
CHECKS = [checks.expect("amount >= 0")]
#: Versions each racing app writes, and keys per version (both apps: the same new keys).
RACE_VERSIONS, RACE_KEYS = 3, 10


def rows(case: str, version: int, app_id: str = "") -> list[Row]:
    """The batch of ``version`` of ``case`` (``app_id``: the racer's name)."""
    if case == "upsert":  # 200 keys per version, overlapping the previous; some deletes
        return [
            {"id": k, "seq": version, "op": "D" if k % 13 == 0 else "U", "value": f"v{version}-{k}"}
            for k in range(version * 120, version * 120 + 200)
        ]
    if case == "append":  # a row repeated inside a batch stays twice
        return [{"id": k % 4, "value": f"v{version}"} for k in range(5)]
    if case == "insert":  # keys 0-9, 5-14, 10-19: the first version's row wins
        return [{"id": k, "value": f"v{version}"} for k in range(version * 5, version * 5 + 10)]
    if case == "replace":  # day 2 is reloaded with fewer rows, then day 3 arrives
        days = {0: [1, 2], 1: [2], 2: [3]}[version]
        count = 3 - version
        return [
            {"day": d, "id": 10 * d + i, "value": f"v{version}"} for d in days for i in range(count)
        ]
    if case == "seed":
        return [{"region": r, "id": i, "value": "seed"} for r in ("EU", "US") for i in range(3)]
    if case == "replace_where":  # each version reloads all of EU
        return [{"region": "EU", "id": i, "value": f"v{version}"} for i in range(version, 4)]
    if case == "scd2":  # events out of order, a correction, a delete, in coalesced versions
        events = {
            0: [(1, 10, "U"), (2, 10, "U"), (3, 10, "U"), (4, 10, "U")],
            1: [(1, 20, "U"), (2, 5, "U"), (3, 15, "D")],
            2: [(1, 20, "U"), (4, 30, "U"), (5, 1, "D")],
        }[version]
        return [{"id": k, "seq": s, "op": op, "value": f"v{version}-{k}"} for k, s, op in events]
    if case == "quarantine":
        return [{"id": k, "amount": -1 if version == 1 and k == 2 else version} for k in range(4)]
    if case == "cli":
        return [{"id": k, "value": f"v{version}"} for k in range(version, version + 3)]
    if case == "race":
        first = version * RACE_KEYS
        return [{"id": k, "writer": app_id} for k in range(first, first + RACE_KEYS)]
    raise ValueError(f"no case {case!r}")
