"""The protocol on a real S3 API: a moto server on 127.0.0.1 (tests/s3server.py).

Covers write / pre_commit / commit / recover / status / gc and the CLI with ``-o``;
two writers of one app (fencing) and two apps racing on the same new keys; a SIGKILL at
every fault point, then recovery; all with delta-rs's default (conditional put), with
``AWS_CONDITIONAL_PUT=etag`` and with the DynamoDB lock option (which deltalake 1.6
ignores: checked by counting the DynamoDB requests); storage errors by kind; and the
refusal of set-ups that declare a store without put-if-absent commits.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from typer.testing import CliRunner

from deltasink import (
    DeltaSink,
    FencedError,
    MergeSpec,
    StorageAccessError,
    StorageError,
    UnsafeStoreError,
)
from deltasink._faults import POINTS
from deltasink.cli import EXIT_CONFIG, EXIT_ERROR, EXIT_FENCED, app
from deltasink.errors import ConfigurationError
from tests import forks
from tests.s3server import BUCKET, S3Server
from tests.test_crash import DIRECT_POINTS  # the fault points a direct write crosses

pytest.importorskip("moto", reason="the S3 tests need moto[server] (the dev extra)")

#: Store set-ups the scenarios run with: delta-rs's default, explicit conditional put,
#: and the DynamoDB lock option (deltalake 1.6 ignores it; deltasink refuses it unless
#: the user opts in, as here).
STORES = {
    "default": {},
    "etag": {"AWS_CONDITIONAL_PUT": "etag"},
    "dynamodb": {
        "AWS_S3_LOCKING_PROVIDER": "dynamodb",
        "DELTA_DYNAMO_TABLE_NAME": "delta_log",
        "deltasink.allow_unsafe_commits": "true",
    },
}

runner = CliRunner()


@pytest.fixture(scope="session")
def s3() -> Iterator[S3Server]:
    server = S3Server()
    server.client().create_bucket(Bucket=BUCKET)
    yield server
    server.stop()


@pytest.fixture
def uri() -> str:
    """A fresh target location in the test bucket."""
    return f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}/orders"


def keys_under(s3: S3Server, uri: str) -> list[str]:
    prefix = uri.removeprefix(f"s3://{BUCKET}/").split("/")[0] + "/"
    listing = s3.client().list_objects_v2(Bucket=BUCKET, Prefix=prefix)
    return [item["Key"] for item in listing.get("Contents", [])]


def rows(uri: str, options: dict[str, str]) -> list[dict[str, Any]]:
    table = DeltaTable(uri, storage_options=options).to_pyarrow_table()
    return table.sort_by("id").to_pylist()


def txn_commits(s3: S3Server, uri: str, app_id: str) -> dict[int, list[int]]:
    """For each batch version of ``app_id``: the target commits carrying its marker."""
    client = s3.client()
    prefix = uri.removeprefix(f"s3://{BUCKET}/") + "/_delta_log/"
    found: dict[int, list[int]] = {}
    listing = client.list_objects_v2(Bucket=BUCKET, Prefix=prefix)
    for item in listing.get("Contents", []):
        name = item["Key"].rsplit("/", 1)[1]
        if not re.fullmatch(r"\d{20}\.json", name):
            continue
        body = client.get_object(Bucket=BUCKET, Key=item["Key"])["Body"].read().decode()
        for line in body.splitlines():
            txn = json.loads(line).get("txn")
            if txn and txn["appId"] == app_id:
                found.setdefault(txn["version"], []).append(int(name[:20]))
    return found


def _sink(uri: str, options: dict[str, str], app_id: str = "orders", **kw: Any) -> DeltaSink:
    return DeltaSink(uri, app_id, MergeSpec(keys=["id"]), storage_options=options, **kw)


@pytest.mark.parametrize("store", list(STORES))
def test_the_protocol_on_s3(s3: S3Server, uri: str, store: str) -> None:
    options = s3.storage_options(**STORES[store])
    read = s3.storage_options()
    s3.counts(reset=True)
    sink = _sink(uri, options)
    sink.write(pa.table({"id": [1, 2], "v": ["a", "b"]}), 0)  # direct publish
    staged = sink.pre_commit(pa.table({"id": [2, 3], "v": ["c", "d"]}), 1)
    assert staged.state == "staged"
    sink.pre_commit(pa.table({"id": [4], "v": ["e"]}), 2)
    st = sink.status()
    assert (st.committed_version, st.pending_versions) == (0, [1, 2])

    report = sink.commit(1)
    assert [r.version for r in report.results] == [1]
    assert report.committed_version == 1
    # A new process recovers the rest.
    recovered = _sink(uri, options).recover()
    assert [(r.version, r.outcome) for r in recovered.results] == [(2, "committed")]
    assert sink.commit(2).results == ()  # replay: a no-op

    assert rows(uri, read) == [
        {"id": 1, "v": "a"},
        {"id": 2, "v": "c"},
        {"id": 3, "v": "d"},
        {"id": 4, "v": "e"},
    ]
    assert txn_commits(s3, uri, "orders") == {0: [0], 1: [1], 2: [2]}
    assert DeltaTable(uri, storage_options=read).version() == 2
    st = _sink(uri, options).status()
    assert (st.committed_version, st.pending_versions) == (2, [])
    assert sink.gc().dry_run is False
    # deltalake 1.6 has no DynamoDB lock: nothing asked DynamoDB, whatever the options.
    assert s3.counts().get("DYNAMODB", 0) == 0


@pytest.mark.parametrize(
    "options",
    [
        {"AWS_S3_ALLOW_UNSAFE_RENAME": "true"},
        {"aws_s3_allow_unsafe_rename": "TRUE"},
        {"AWS_S3_LOCKING_PROVIDER": "dynamodb"},
        {"AWS_CONDITIONAL_PUT": "disabled"},
        {"conditional_put": "disabled"},
    ],
    ids=["unsafe-rename", "unsafe-rename-lower", "dynamodb", "cput-disabled", "cput-short"],
)
def test_unsafe_set_ups_are_refused_before_anything_is_written(
    s3: S3Server, uri: str, options: dict[str, str]
) -> None:
    with pytest.raises(UnsafeStoreError, match=r"allow_unsafe_commits=True") as err:
        _sink(uri, s3.storage_options(**options))
    assert err.value.table == uri
    assert len(err.value.reasons) == 1
    assert keys_under(s3, uri) == []


def test_an_unsafe_option_from_the_environment_is_refused(
    s3: S3Server, uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_S3_ALLOW_UNSAFE_RENAME", "true")
    with pytest.raises(UnsafeStoreError, match="AWS_S3_ALLOW_UNSAFE_RENAME"):
        _sink(uri, s3.storage_options())
    monkeypatch.setenv("AWS_S3_ALLOW_UNSAFE_RENAME", "false")
    _sink(uri, s3.storage_options()).write(pa.table({"id": [1], "v": ["a"]}), 0)
    assert rows(uri, s3.storage_options()) == [{"id": 1, "v": "a"}]


@pytest.mark.parametrize("how", ["keyword", "option"])
def test_opting_in_lets_an_unsafe_set_up_write(s3: S3Server, uri: str, how: str) -> None:
    options = s3.storage_options(AWS_S3_ALLOW_UNSAFE_RENAME="true")
    if how == "keyword":
        sink = _sink(uri, options, allow_unsafe_commits=True)
    else:
        sink = _sink(uri, {**options, "deltasink.allow_unsafe_commits": "true"})
    sink.write(pa.table({"id": [1], "v": ["a"]}), 0)
    assert rows(uri, s3.storage_options()) == [{"id": 1, "v": "a"}]
    assert txn_commits(s3, uri, "orders") == {0: [0]}


def test_an_unknown_deltasink_option_is_refused(s3: S3Server, uri: str) -> None:
    with pytest.raises(ConfigurationError, match=r"deltasink\.allow_unsafe_commits"):
        _sink(uri, s3.storage_options(**{"deltasink.allow_unsafe_rename": "true"}))
    with pytest.raises(ConfigurationError, match="true or false"):
        _sink(uri, s3.storage_options(**{"deltasink.allow_unsafe_commits": "maybe"}))
    assert keys_under(s3, uri) == []


def _cli(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def _o(options: dict[str, str]) -> list[str]:
    return [arg for key, value in options.items() for arg in ("-o", f"{key}={value}")]


def test_the_cli_with_storage_options(s3: S3Server, uri: str) -> None:
    options = s3.storage_options()
    sink = _sink(uri, options)
    sink.write(pa.table({"id": [1], "v": ["a"]}), 0)
    sink.pre_commit(pa.table({"id": [2], "v": ["b"]}), 1)

    code, out = _cli("status", uri, "--app", "orders", "--json", *_o(options))
    assert code == 0, out
    assert (json.loads(out)["committed_version"], json.loads(out)["pending_versions"]) == (0, [1])
    code, out = _cli("recover", uri, "--app", "orders", *_o(options))
    assert code == 0, out
    code, out = _cli("gc", uri, "--app", "orders", *_o(options))
    assert code == 0, out
    assert rows(uri, options) == [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}]
    assert txn_commits(s3, uri, "orders") == {0: [0], 1: [1]}

    # The unsafe set-up is refused by name (exit 3); the opt-in lets the command run.
    unsafe = {**options, "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}
    code, out = _cli("status", uri, "--app", "orders", *_o(unsafe))
    assert code == EXIT_CONFIG
    assert "UnsafeStoreError" in out
    opted = {**unsafe, "deltasink.allow_unsafe_commits": "true"}
    code, out = _cli("status", uri, "--app", "orders", "--json", *_o(opted))
    assert code == 0, out
    assert json.loads(out)["committed_version"] == 1


@pytest.mark.parametrize("store", list(STORES))
def test_two_writers_of_one_app_the_older_is_fenced(s3: S3Server, uri: str, store: str) -> None:
    options = s3.storage_options(**STORES[store])
    old = _sink(uri, options)
    old.pre_commit(pa.table({"id": [1], "v": ["a"]}), 0)
    new = _sink(uri, options)
    new.recover()
    new.write(pa.table({"id": [2], "v": ["b"]}), 1)
    with pytest.raises(FencedError):
        old.pre_commit(pa.table({"id": [3], "v": ["zombie"]}), 2)
    with pytest.raises(FencedError):
        old.write(pa.table({"id": [3], "v": ["zombie"]}), 2)
    assert rows(uri, s3.storage_options()) == [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}]
    assert txn_commits(s3, uri, "orders") == {0: [0], 1: [1]}
    code, out = _cli("status", uri, "--app", "orders", "--json", *_o(options))
    assert code == 0, out
    assert json.loads(out)["pending_versions"] == []
    assert EXIT_FENCED == 7  # what the CLI would exit with for the zombie


@pytest.mark.parametrize("store", list(STORES))
def test_two_apps_racing_on_the_same_new_keys(s3: S3Server, uri: str, store: str) -> None:
    """Two writers (app ids) upsert the same keys into a target neither has created,
    five batches each, at the same time: each key once, every batch's marker in
    exactly one commit, the last writer's value per key."""
    options = s3.storage_options(**STORES[store])
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def run(app_id: str) -> None:
        try:
            sink = _sink(uri, options, app_id=app_id, max_commit_attempts=50)
            start.wait()
            for version in range(5):
                ids = [version * 2, version * 2 + 1]
                sink.write(pa.table({"id": ids, "v": [app_id] * 2}), version)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(a,)) for a in ("left", "right")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    got = rows(uri, s3.storage_options())
    assert [r["id"] for r in got] == list(range(10))  # each key exactly once
    assert {r["v"] for r in got} <= {"left", "right"}
    for app_id in ("left", "right"):
        commits = txn_commits(s3, uri, app_id)
        assert sorted(commits) == [0, 1, 2, 3, 4]
        assert all(len(c) == 1 for c in commits.values()), commits
    # every table version is one commit: no commit file was overwritten
    assert DeltaTable(uri, storage_options=s3.storage_options()).version() == 9


JOB = textwrap.dedent(
    """
    import contextlib, json, os, signal, sys
    import pyarrow as pa
    from deltasink import DeltaSink, MergeSpec, _faults

    target, path, options, point = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
    kill = lambda: os.kill(os.getpid(), signal.SIGKILL)
    # SIGKILL at the second pass of the point (version 1): no clean-up, no flush.
    armed = _faults.armed(point, kill, after=1) if point else contextlib.nullcontext()
    with armed:
        sink = DeltaSink(target, "crashy", MergeSpec(mode="append"), storage_options=options)
        sink.recover()
        for version, ids in enumerate([[1, 2], [3], [4, 5]]):
            if path == "direct":
                sink.write(pa.table({"id": ids}), version)
            else:
                sink.pre_commit(pa.table({"id": ids}), version)
                sink.commit(version)
    print("done")
    """
)
CRASHES = [("default", "staged", p) for p in POINTS] + [
    ("default", "direct", p) for p in DIRECT_POINTS
]
CRASHES += [("dynamodb", "staged", "publish.after_target_commit")]
CRASHES += [("etag", "staged", "stage.after_files")]


def _rerun(uri: str, path: str, options: dict[str, str]) -> None:
    """The job again, from the start, in this process (what JOB does unarmed)."""
    sink = DeltaSink(uri, "crashy", MergeSpec(mode="append"), storage_options=options)
    sink.recover()
    for version, ids in enumerate([[1, 2], [3], [4, 5]]):
        if path == "direct":
            sink.write(pa.table({"id": ids}), version)
        else:
            sink.pre_commit(pa.table({"id": ids}), version)
            sink.commit(version)


def _job(uri: str, path: str, options: dict[str, str], point: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", JOB, uri, path, json.dumps(options), point],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize(("store", "path", "point"), CRASHES)
def test_sigkill_at_a_fault_point_then_recover(
    s3: S3Server, uri: str, store: str, path: str, point: str
) -> None:
    """The child SIGKILLs itself at the second pass of ``point`` (version 1); a
    restart recovers, then the job runs again from the start (replays are no-ops)."""
    options = s3.storage_options(**STORES[store])
    # The job (JOB's, as tests.forks.sigkilled_job) in a process of its own, forked
    code, output = forks.run(forks.sigkilled_job, uri, path, options, point)
    assert code == -signal.SIGKILL, output
    report = DeltaSink(uri, "crashy", MergeSpec(mode="append"), storage_options=options).recover()
    assert all(r.outcome == "committed" for r in report.results)
    _rerun(uri, path, options)
    got = DeltaTable(uri, storage_options=s3.storage_options()).to_pyarrow_table()
    assert sorted(got["id"].to_pylist()) == [1, 2, 3, 4, 5]  # 0 lost, 0 duplicated
    commits = txn_commits(s3, uri, "crashy")
    assert {v: len(c) for v, c in commits.items()} == {0: 1, 1: 1, 2: 1}


def test_a_sigkill_mid_write_then_recover(s3: S3Server, uri: str) -> None:
    """A real SIGKILL from outside, while the child (a fresh interpreter running JOB)
    is inside a staging write."""
    options = s3.storage_options()
    child = _job(uri, "staged", options, "")
    try:
        child.communicate(timeout=4)
    except subprocess.TimeoutExpired:
        child.send_signal(signal.SIGKILL)
        child.communicate()
    DeltaSink(uri, "crashy", MergeSpec(mode="append"), storage_options=options).recover()
    _rerun(uri, "staged", options)
    got = DeltaTable(uri, storage_options=options).to_pyarrow_table()
    assert sorted(got["id"].to_pylist()) == [1, 2, 3, 4, 5]


# -- storage errors by kind -------------------------------------------------------------


def _one_line(text: str) -> bool:
    return "\n" not in text.strip()


def test_wrong_credentials_is_a_storage_access_error(
    uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INITIAL_NO_AUTH_ACTION_COUNT", "0")  # moto checks credentials
    server = S3Server()
    try:
        options = server.storage_options()
        sink = _sink(uri, options)
        with pytest.raises(StorageAccessError, match="InvalidAccessKeyId") as err:
            sink.write(pa.table({"id": [1], "v": ["a"]}), 0)
        assert _one_line(str(err.value))
        code, out = _cli("status", uri, "--app", "orders", "--json", *_o(options))
        assert code == EXIT_ERROR
        assert json.loads(out)["error"] == "StorageAccessError"
    finally:
        server.stop()


def test_an_unreachable_endpoint_is_a_storage_error(uri: str) -> None:
    options = {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",  # discard port: nothing listens
        "AWS_ACCESS_KEY_ID": "x",
        "AWS_SECRET_ACCESS_KEY": "y",
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
        "max_retries": "1",
        "retry_timeout": "2s",
    }
    with pytest.raises(StorageError, match="Connection refused") as err:
        _sink(uri, options).write(pa.table({"id": [1], "v": ["a"]}), 0)
    assert not isinstance(err.value, StorageAccessError)
    assert _one_line(str(err.value))
    code, out = _cli("status", uri, "--app", "orders", "--json", *_o(options))
    assert code == EXIT_ERROR
    assert json.loads(out)["error"] == "StorageError"


def test_a_missing_bucket_is_a_storage_error(s3: S3Server) -> None:
    uri = "s3://no-such-bucket-deltasink/orders"
    options = s3.storage_options()
    with pytest.raises(StorageError, match="NoSuchBucket") as err:
        _sink(uri, options).write(pa.table({"id": [1], "v": ["a"]}), 0)
    assert not isinstance(err.value, StorageAccessError)
    assert _one_line(str(err.value))
    code, out = _cli("status", uri, "--app", "orders", "--json", *_o(options))
    assert code == EXIT_ERROR
    assert json.loads(out)["error"] == "StorageError"


def test_a_staging_table_on_s3_checkpoints_every_ten_commits(s3: S3Server, uri: str) -> None:
    """delta-rs reads every staging commit since the last checkpoint for each state read
    (one GET each on S3); the staging table bounds that with a short interval."""
    options = s3.storage_options()
    sink = _sink(uri, options)
    for version in range(8):  # two staging commits per direct write, plus the claim
        sink.write(pa.table({"id": [version], "v": ["x"]}), version)
    staging = DeltaTable(sink.staging, storage_options=options)
    assert staging.metadata().configuration["delta.checkpointInterval"] == "10"
    prefix = sink.staging.removeprefix(f"s3://{BUCKET}/") + "/_delta_log/"
    names = [k.rsplit("/", 1)[1] for k in keys_under(s3, sink.staging) if k.startswith(prefix)]
    assert "_last_checkpoint" in names
    assert [r["id"] for r in rows(uri, options)] == list(range(8))


def test_a_marker_read_follows_the_commits_after_the_last_one(s3: S3Server, uri: str) -> None:
    """On S3 a marker read on a table object that moved on reads only the new commit
    files; it must agree with delta-rs's full replay whatever the new commits hold."""
    from deltalake import CommitProperties, Transaction, write_deltalake

    from deltasink.backends.deltalog.tables import txn_version

    options = s3.storage_options()

    def append(app: str | None, version: int = 0) -> None:
        txns = [Transaction(app_id=app, version=version)] if app else []
        props = CommitProperties(app_transactions=txns)
        write_deltalake(
            uri,
            pa.table({"id": [version]}),
            mode="append",
            storage_options=options,
            commit_properties=props,
        )

    append("a", 3)
    table = DeltaTable(uri, storage_options=options)
    assert (txn_version(table, "a"), txn_version(table, "b")) == (3, None)
    for step in [("b", 1), (None, 0), ("a", 4), ("a", 5), ("b", 2), (None, 0)]:
        append(*step)
        table.update_incremental()
        full = DeltaTable(uri, storage_options=options)
        for writer in ("a", "b"):
            assert txn_version(table, writer) == full.transaction_version(writer), (step, writer)
    assert (txn_version(table, "a"), txn_version(table, "b")) == (5, 2)


def test_the_staging_log_on_s3_is_kept_by_commit_count(
    s3: S3Server, uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The count retention through the object store: a checkpoint every ten commits,
    the three commits before the state a checkpoint commit was made on kept."""
    from deltasink.backends.embedded import retention

    monkeypatch.setattr(retention, "KEEP_COMMITS", 3)
    options = s3.storage_options()
    sink = _sink(uri, options)
    for version in range(15):  # about 17 staging commits: a checkpoint trims
        sink.write(pa.table({"id": [version], "v": ["x"]}), version)
    staging = DeltaTable(sink.staging, storage_options=options)
    latest = staging.version()
    prefix = sink.staging.removeprefix(f"s3://{BUCKET}/") + "/_delta_log/"
    names = [k.rsplit("/", 1)[1] for k in keys_under(s3, sink.staging) if k.startswith(prefix)]
    commits = sorted(int(n[:20]) for n in names if n.endswith(".json"))
    checkpoint = json.loads(
        s3.client().get_object(Bucket=BUCKET, Key=prefix + "_last_checkpoint")["Body"].read()
    )["version"]
    assert commits == list(range(commits[0], latest + 1))
    assert checkpoint - 3 - 1 <= commits[0] <= checkpoint - 3
    assert f"{checkpoint:020d}.checkpoint.parquet" in names
    assert staging.transaction_version("orders#publishing") == 14
    assert commits[0] > 0  # trimmed
    report = _sink(uri, options).recover()
    assert (report.committed_version, report.results) == (14, ())
    assert [r["id"] for r in rows(uri, options)] == list(range(15))


def test_recover_reads_the_staging_state_its_claim_committed(s3: S3Server, uri: str) -> None:
    """recover() claims the writer role, then reads the state it publishes from: the
    claim's commit is that state, so the log is not listed again for it (one
    ``_last_checkpoint`` read: the table's opening)."""
    options = s3.storage_options()
    sink = _sink(uri, options)
    for version in range(3):
        sink.write(pa.table({"id": [version], "v": ["x"]}), version)
    s3.counts(reset=True)
    report = _sink(uri, options).recover()
    assert report.committed_version == 2
    staging = sink.staging.removeprefix(f"s3://{BUCKET}/") + "/_delta_log/"
    reads = [r for r in s3.requests() if r.startswith("GET") and staging in r]
    assert len([r for r in reads if r.split("?")[0].endswith("/_last_checkpoint")]) == 1
    epoch = DeltaTable(sink.staging, storage_options=options).metadata().configuration
    assert epoch["deltasink.epoch"] == "2"


# -- a running writer's requests, and the caches behind them (issue 39) ------------------


def _by_verb(s3: S3Server) -> dict[str, int]:
    """The requests since the last reset, by verb (a listing counts as LIST)."""
    return {k: v for k, v in s3.counts(reset=True).items() if v}


def _upsert(ids: list[int], tag: str) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [tag] * len(ids)})


def test_a_steady_direct_write_costs_the_merge_and_one_staging_commit(
    s3: S3Server, uri: str
) -> None:
    """Exact requests of a running sink's 10-row upsert, by verb: the MERGE's (its data
    file and commit), the publish intent (one staging commit), and three probes of a
    next commit file, each a ranged GET of its first byte (the state read, the fencing
    check, the target before the MERGE); no HEAD, no listing beyond the two each
    delta-rs commit makes, nothing read back."""
    options = s3.storage_options()
    sink = _sink(uri, options)
    sink.write(_upsert(list(range(100)), "seed"), 0)
    sink.write(_upsert(list(range(10)), "warm"), 1)
    for version in (2, 3, 4):
        s3.counts(reset=True)
        sink.write(_upsert(list(range(version, version + 10)), f"v{version}"), version)
        assert _by_verb(s3) == {"LIST": 4, "PUT": 3, "GET": 10}, version
    assert [r["v"] for r in rows(uri, options)][4:14] == ["v4"] * 10
    assert txn_commits(s3, uri, "orders") == {v: [v] for v in range(5)}


def test_a_steady_direct_write_sends_its_independent_requests_together(
    s3: S3Server, uri: str
) -> None:
    """Round trips, each request delayed as a remote store delays it. Before the MERGE
    writes its file a running sink's 10-row upsert waits for seven, one after another:
    the state read's probe, the publish intent's five (delta-rs's commit: LIST, PUT,
    then LIST and two GETs to move the table object) and the fencing check's probe.
    The target's probe and the MERGE's three reads of the target's file go out
    meanwhile: they depend on neither (they were four more). The order that matters
    stays: the intent and the fencing check are done before the target commit."""
    from tests.storeproxy import StoreProxy, sequential

    proxy = StoreProxy(s3.port)
    try:
        options = s3.storage_options(AWS_ENDPOINT_URL=proxy.endpoint)
        sink = _sink(uri, options)
        sink.write(_upsert(list(range(100)), "seed"), 0)
        sink.write(_upsert(list(range(10)), "warm"), 1)
        staging = sink.staging.removeprefix(f"s3://{BUCKET}/") + "/_delta_log/"
        target = uri.removeprefix(f"s3://{BUCKET}/") + "/_delta_log/"
        proxy.set_delay(100)
        for version in (2, 3):
            proxy.reset()
            s3.counts(reset=True)
            sink.write(_upsert(list(range(version, version + 10)), f"v{version}"), version)
            assert _by_verb(s3) == {"LIST": 4, "PUT": 3, "GET": 10}
            spans = proxy.spans()
            written = min(a for a, _, r in spans if r.startswith("PUT") and ".parquet" in r)
            before = [(a, b) for a, b, _ in spans if a < written]
            assert (len(before), sequential(before)) == (11, 7), spans
            commit = min(a for a, _, r in spans if r.startswith("PUT") and target in r)
            assert max(b for _, b, r in spans if staging in r) < commit, spans
        proxy.set_delay(0)
        assert [r["v"] for r in rows(uri, options)][3:13] == ["v3"] * 10
        assert txn_commits(s3, uri, "orders") == {v: [v] for v in range(4)}
    finally:
        proxy.stop()


@pytest.mark.parametrize("span", [1024, 1])
def test_a_commit_by_another_writer_between_writes_is_read_before_the_merge(
    s3: S3Server, uri: str, span: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe that stands in for a listing finds another writer's commit: the MERGE
    runs on the snapshot that holds it (its row is updated, not duplicated) and the
    marker read from the sink's own commit still answers for the app. ``span``: the
    commit files one probe handler knows (1: a new handler for every probe)."""
    from deltalake import write_deltalake

    from deltasink.backends.deltalog import tables

    monkeypatch.setattr(tables, "_PROBE_SPAN", span)
    options = s3.storage_options()
    sink = _sink(uri, options)
    sink.write(_upsert([1], "a"), 0)
    write_deltalake(uri, _upsert([2], "other"), mode="append", storage_options=options)
    s3.counts(reset=True)
    sink.write(_upsert([2, 3], "b"), 1)
    assert _by_verb(s3)["LIST"] == 5  # the one listing: the target, before the MERGE
    assert rows(uri, options) == [
        {"id": 1, "v": "a"},
        {"id": 2, "v": "b"},
        {"id": 3, "v": "b"},
    ]
    assert txn_commits(s3, uri, "orders") == {0: [0], 1: [2]}
    assert sink.write(_upsert([9], "replay"), 1).results == ()  # a replay: no-op


def test_a_failed_intent_stops_the_merge_that_read_the_target_beside_it(
    s3: S3Server, uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On an object store the MERGE reads the target while the publish intent is
    committed; an intent that fails (here after the MERGE had time to read the target's
    files) stops it before its commit: the target is untouched, the version is staged
    and the error says so, and ``recover()`` publishes it once."""
    import time

    from deltasink import CommitError
    from deltasink.backends.embedded.stage import StagingWriter

    options = s3.storage_options()
    sink = _sink(uri, options)
    sink.write(_upsert(list(range(10)), "a"), 0)
    sink.write(_upsert([1], "warm"), 1)

    def slow_failure(writer: StagingWriter, *args: Any, **kwargs: Any) -> None:
        time.sleep(0.5)
        raise OSError("the store refused the intent")

    monkeypatch.setattr(StagingWriter, "record_intent", slow_failure)
    with pytest.raises(CommitError, match=r"the store refused the intent.*staged now"):
        sink.write(_upsert([2, 3], "b"), 2)
    monkeypatch.undo()
    assert txn_commits(s3, uri, "orders") == {0: [0], 1: [1]}
    assert [r["v"] for r in rows(uri, options)][1:4] == ["warm", "a", "a"]
    assert sink.recover().committed_version == 2
    assert txn_commits(s3, uri, "orders") == {0: [0], 1: [1], 2: [2]}
    assert [r["v"] for r in rows(uri, options)][1:4] == ["warm", "b", "b"]


def test_a_claim_after_the_intent_fences_the_write_before_the_target_commit_on_s3(
    s3: S3Server, uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fencing check right before the target commit is one probe on S3: it must still
    see a newer writer's claim made after the intent."""
    from deltasink.backends.embedded.stage import StagingWriter

    options = s3.storage_options()
    old = _sink(uri, options)
    old.write(_upsert([1], "a"), 0)
    record_intent = StagingWriter.record_intent

    def intent_then_claim(writer: StagingWriter, *args: Any, **kwargs: Any) -> None:
        record_intent(writer, *args, **kwargs)
        _sink(uri, options).recover()  # a newer writer claims the role

    monkeypatch.setattr(StagingWriter, "record_intent", intent_then_claim)
    with pytest.raises(FencedError, match="took over the staging table"):
        old.write(_upsert([2], "zombie"), 1)
    monkeypatch.undo()
    assert rows(uri, options) == [{"id": 1, "v": "a"}]
    assert txn_commits(s3, uri, "orders") == {0: [0]}


def test_a_snapshot_older_than_the_freshness_window_is_listed_again(
    s3: S3Server, uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A probe of the next commit file stands in for a listing only for a snapshot known
    to be the latest less than ``FRESH_S`` ago (so no log clean-up can have removed
    that file since); past it, the log is listed."""
    from deltasink.backends.deltalog import tables

    options = s3.storage_options()
    sink = _sink(uri, options)
    sink.write(_upsert(list(range(10)), "seed"), 0)
    sink.write(_upsert([1], "warm"), 1)
    monkeypatch.setattr(tables, "FRESH_S", 0.0)
    s3.counts(reset=True)
    sink.write(_upsert([2], "late"), 2)
    counts = _by_verb(s3)
    assert counts.get("HEAD", 0) == 0
    assert counts["LIST"] == 4 + 4  # each log at each of its two reads
    assert txn_commits(s3, uri, "orders") == {0: [0], 1: [1], 2: [2]}


def test_a_pre_commit_puts_its_file_once_and_reads_nothing_back(s3: S3Server, uri: str) -> None:
    """On S3 delta-rs writes a staged version's file in its commit's call: one PUT (not a
    multipart upload), the commit, and one probe (a GET) for the state read; the commit after
    pre-committed versions reads none of them back (nor the staging history)."""
    options = s3.storage_options()
    sink = _sink(uri, options)
    sink.write(_upsert(list(range(10)), "seed"), 0)
    sink.write(_upsert([1], "warm"), 1)  # a MERGE: the target held at the sink's commit
    for version in (2, 3):
        s3.counts(reset=True)
        assert sink.pre_commit(_upsert([version, 20 + version], f"v{version}"), version).state == (
            "staged"
        )
        assert _by_verb(s3) == {"PUT": 2, "LIST": 2, "GET": 3}, version
    staged = [k for k in keys_under(s3, sink.staging) if "/_deltasink_version=" in k]
    assert len(staged) == 2  # one file per version, in its partition
    assert sink.commit(3).committed_versions == [2, 3]
    assert [r["v"] for r in rows(uri, options) if r["id"] in (1, 2, 3, 22, 23)] == [
        "warm",
        "v2",
        "v3",
        "v2",
        "v3",
    ]
    recovered = _sink(uri, options).recover()  # a new process: nothing left pending
    assert (recovered.committed_version, recovered.results) == (3, ())


def test_a_version_staged_with_other_columns_is_written_as_before(s3: S3Server, uri: str) -> None:
    """A version whose columns are not the staging table's is not written by delta-rs
    (its file must read back with the columns it was staged with): deltasink writes it
    and commits it as written, as on local disk."""
    options = s3.storage_options()
    spec = MergeSpec(keys=["id"], allow_missing_columns=True)  # a subset on purpose
    sink = DeltaSink(uri, "orders", spec, storage_options=options)
    sink.write(pa.table({"id": [1, 2], "v": ["a", "b"], "n": [1, 2]}), 0)
    sink.pre_commit(pa.table({"id": [1], "v": ["c"], "n": [3]}), 1)  # the table's columns
    sink.pre_commit(pa.table({"id": [2], "v": ["d"]}), 2)  # without n: left alone
    assert sink.commit(2).committed_versions == [1, 2]
    assert rows(uri, options) == [{"id": 1, "v": "c", "n": 3}, {"id": 2, "v": "d", "n": 2}]
    assert txn_commits(s3, uri, "orders") == {0: [0], 1: [1], 2: [2]}  # one by one


def test_compaction_and_history_reads_on_s3(s3: S3Server, uri: str) -> None:
    """The compaction's own commit (rewrite: its files written beside the table, then
    uploaded) and the history read commit file by commit file, on an object store."""
    from deltasink.backends.deltalog.history import history
    from deltasink.ops.history import is_compaction

    options = s3.storage_options()
    sink = _sink(uri, options)
    for version in range(4):
        sink.write(pa.table({"id": [version], "v": ["x"]}), version)
    position = "2026-11-26"
    sink.write(pa.table({"id": [1], "v": ["y"]}), 4, position=position)
    sink.optimize()
    table = DeltaTable(uri, storage_options=options)
    assert table.get_add_actions().num_rows == 1
    assert rows(uri, options) == [
        {"id": 0, "v": "x"},
        {"id": 1, "v": "y"},
        {"id": 2, "v": "x"},
        {"id": 3, "v": "x"},
    ]
    found = history(table)
    assert [c["version"] for c in found] == list(range(table.version(), -1, -1))
    assert found == table.history()
    assert is_compaction(found[0])
    assert sink.commits_since_optimize() == 0
    assert sink.offsets().origin is not None  # the origin, read back from the history
    leftovers = [k for k in keys_under(s3, uri) if ".deltasink-rewrite-" in k]
    assert leftovers == []
